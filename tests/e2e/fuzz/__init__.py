"""schemathesis against a running ``trellis serve`` with OpenZiti's own specs (issue 8 §7).

``specs`` converts the upstream YAML to JSON with its fix-ups, ``world`` seeds a small network
through the HTTP API, ``runner`` runs schemathesis (a CLI subprocess) and reads its reports, and
``baseline.json`` lists the reviewed deviations and the operations left out of the runs.
"""
