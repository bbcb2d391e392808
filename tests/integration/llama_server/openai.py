"""A stand-in for the `openai` Python package, which Debian 12 does not ship.

llama.cpp's server tests import it at the top of test_completion.py and test_chat_completion.py;
without it pytest could collect neither file. With this module first on PYTHONPATH they are
collected, and each test that uses the client fails at once with the reason below (listed in
llama_server_xfail.txt). The official Node SDK is the client of record (test_openai_sdk.sh).
"""


class OpenAI:
    def __init__(self, *args, **kwargs):
        raise RuntimeError(
            "the openai Python package is not installed (Debian 12 has none); "
            "layermesh checks the official Node SDK instead (test_openai_sdk.sh)"
        )
