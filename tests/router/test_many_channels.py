"""1,000 idle SDK channels on one router: all stay open, and traffic on a new pair still flows.

A router keeps one TLS channel per SDK context; a network's routers hold many that are idle most
of the time. Each channel here has said hello (its API session checked) and sends nothing more;
then a binder and a dialer connect and exchange data as usual, and every idle channel is still
there, answering a latency probe.
"""

from __future__ import annotations

import asyncio

import pytest

from channel.edge import STATE_CONNECTED
from channel.frames import LATENCY, RESULT, RESULT_SUCCESS, Message
from router.edge import Phase
from tests.router.helpers import Pki, Sdk, run_async
from tests.router.test_edge import Router, bind, data, dial, next_data

IDLE = 1000
#: TLS handshakes opened at once (the listener's backlog, and these 2 cores, set the pace).
AT_ONCE = 50

pytestmark = pytest.mark.timeout(600)


@run_async
async def test_a_thousand_idle_channels_stay_and_traffic_still_flows(pki: Pki) -> None:
    async with Router(pki) as router:

        async def idle_one() -> Sdk:
            sdk = await router.connect("dialer")
            answer = await sdk.hello("tok-dialer")
            assert answer.content_type == RESULT
            assert answer.flag(RESULT_SUCCESS)
            return sdk

        idle: list[Sdk] = []
        for start in range(0, IDLE, AT_ONCE):
            idle += await asyncio.gather(*(idle_one() for _ in range(min(AT_ONCE, IDLE - start))))
        assert sum(1 for s in router.listener.channels() if s.phase is Phase.OPEN) == IDLE

        router.controller.route("dial-1", "bind-1")
        binder = await router.sdk("binder")
        dialer = await router.sdk("dialer")
        bound = await bind(binder)
        assert bound.content_type == STATE_CONNECTED
        _, answer = await dial(dialer, binder)
        assert answer.content_type == STATE_CONNECTED
        dialer.channel.send(data(dialer, 0, b"through the crowd"))
        assert (await next_data(binder)).body == b"through the crowd"

        assert sum(1 for s in router.listener.channels() if s.phase is Phase.OPEN) == IDLE + 2
        assert all(sdk.channel.is_open for sdk in idle)
        for sdk in idle[:: IDLE // 10]:  # a sample of the idle ones still answers
            probe = await sdk.ask(Message(LATENCY))
            assert probe.flag(RESULT_SUCCESS)
