"""A LiteLLM proxy callback that records every request as the proxy received
it (one JSON line per request in $BATON_LITELLM_RECORD), so Baton's tests can
check that generation settings and extra body fields arrived as sent."""

import json
import os

from litellm.integrations.custom_logger import CustomLogger

# Fields the proxy adds itself; everything else is what the client sent.
PROXY_FIELDS = {"metadata", "proxy_server_request", "litellm_call_id", "litellm_logging_obj", "secret_fields"}


class Recorder(CustomLogger):
    async def async_pre_call_hook(self, user_api_key_dict, cache, data, call_type):
        with open(os.environ["BATON_LITELLM_RECORD"], "a") as f:
            f.write(json.dumps({k: v for k, v in data.items() if k not in PROXY_FIELDS}, default=str) + "\n")
        return data


recorder = Recorder()
