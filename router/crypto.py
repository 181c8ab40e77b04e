"""End-to-end encryption for a connection the router terminates itself (router-hosted services).

OpenZiti's SDKs encrypt a service whose ``encryptionRequired`` is set between the two ends: the
dialer is the libsodium ``crypto_kx`` *client* with a key pair of its own per connection (its
public key travels in the Connect's header 1003), the other end the kx *server*. When the router
hosts the service (``host.v1``) it is that other end: a fresh key pair per connection, its public
key in the StateConnected answering the Connect. Each direction is then one
``crypto_secretstream_xchacha20poly1305`` stream:

- the first Data message each way is the sender's 24-byte stream header (nothing else);
- every later Data body is one ``push`` of tag MESSAGE (0) without additional data: the
  ciphertext is the plaintext and 17 bytes more;
- a Data message with FIN and an empty body is not encrypted.

:class:`ServerCrypto` is the router's side of one connection (PyNaCl's ``nacl.bindings``, the
same libsodium the C SDK uses). A failure to decrypt is :class:`CryptoError`: the connection must
end, since a secretstream cannot skip a message.
"""

from __future__ import annotations

from nacl import bindings
from nacl.exceptions import CryptoError as _NaclCryptoError

#: Bytes of a kx public key, of a stream header, and what a message adds to its plaintext.
PUBLIC_KEY_BYTES = bindings.crypto_kx_PUBLIC_KEY_BYTES
HEADER_BYTES = bindings.crypto_secretstream_xchacha20poly1305_HEADERBYTES
OVERHEAD = bindings.crypto_secretstream_xchacha20poly1305_ABYTES
TAG_MESSAGE = bindings.crypto_secretstream_xchacha20poly1305_TAG_MESSAGE
#: The most plaintext one message carries (what the C SDK sends per Data at most).
MAX_PLAINTEXT = 32 * 1024


class CryptoError(Exception):
    """The peer's stream header or a message does not decrypt (or comes out of turn)."""


class ServerCrypto:
    """The kx server's side of one connection: its key pair, the stream it sends (``push``), and
    the stream it receives (``pull``) once the peer's header has come.

    ``peer_key`` is the dialer's 32-byte public key (header 1003 of its Connect)."""

    __slots__ = ("_pull", "_pulling", "_push", "_rx", "_tx_header", "public_key")

    def __init__(self, peer_key: bytes) -> None:
        if len(peer_key) != PUBLIC_KEY_BYTES:
            raise CryptoError(f"a public key has {PUBLIC_KEY_BYTES} bytes, not {len(peer_key)}")
        public, secret = bindings.crypto_kx_keypair()
        try:
            rx, tx = bindings.crypto_kx_server_session_keys(public, secret, peer_key)
        except _NaclCryptoError as ex:  # a key libsodium rejects (a low-order point)
            raise CryptoError("the peer's public key is not usable") from ex
        self.public_key: bytes = public
        self._rx = rx
        self._push = bindings.crypto_secretstream_xchacha20poly1305_state()
        self._pull = bindings.crypto_secretstream_xchacha20poly1305_state()
        self._pulling = False
        self._tx_header = bindings.crypto_secretstream_xchacha20poly1305_init_push(self._push, tx)

    @property
    def header(self) -> bytes:
        """The header of the stream this side sends: the first Data message it sends."""
        return self._tx_header

    @property
    def has_peer_header(self) -> bool:
        """Whether the peer's stream header has come (before it, a Data body is that header)."""
        return self._pulling

    def take_peer_header(self, header: bytes) -> None:
        """The peer's first Data body: its stream header (exactly 24 bytes)."""
        if self._pulling:
            raise CryptoError("a second stream header")
        if len(header) != HEADER_BYTES:
            raise CryptoError(
                f"the first encrypted message has {len(header)} bytes, not a {HEADER_BYTES}-byte header"
            )
        try:
            bindings.crypto_secretstream_xchacha20poly1305_init_pull(self._pull, header, self._rx)
        except _NaclCryptoError as ex:
            raise CryptoError("the peer's stream header is not usable") from ex
        self._pulling = True

    def encrypt(self, plaintext: bytes) -> bytes:
        """One message of the sent stream (tag MESSAGE, no additional data)."""
        return bindings.crypto_secretstream_xchacha20poly1305_push(self._push, plaintext, None, TAG_MESSAGE)

    def decrypt(self, ciphertext: bytes) -> bytes:
        """The plaintext of the peer's next message."""
        if not self._pulling:
            raise CryptoError("a message before the stream header")
        if len(ciphertext) < OVERHEAD:
            raise CryptoError(f"an encrypted message of {len(ciphertext)} bytes is too short")
        try:
            plaintext, _tag = bindings.crypto_secretstream_xchacha20poly1305_pull(
                self._pull, ciphertext, None
            )
        except _NaclCryptoError as ex:
            raise CryptoError("a message does not decrypt") from ex
        return plaintext
