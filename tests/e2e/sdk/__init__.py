"""The real OpenZiti Python SDK (``openziti==0.6.0``, C SDK 0.29.3) for the e2e tests.

``sdk_venv`` builds (once) and finds the test-only virtualenv ``.venv-zsdk/`` that holds the
SDK; the ``*_driver.py`` scripts are run by that venv's interpreter, never imported by pytest.
"""
