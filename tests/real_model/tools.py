"""The ToolHost server of the real-model demo: one tool, `get_weather`,
served with the Python client's `ToolServer` on the port given as the only
argument. Its answers are a fixed table (the demo is about the model
calling a tool through Baton, not about the weather)."""

import sys

from baton_client import ToolServer

FORECASTS = {
    "oslo": "Oslo: 4 °C, light rain, wind 5 m/s from the south-west",
    "lisbon": "Lisbon: 19 °C, sunny, wind 3 m/s from the north",
}

tools = ToolServer()


@tools.tool
async def get_weather(ctx, city: str) -> str:
    """Today's weather in a city."""
    await ctx.progress(50, f"looking up {city}")
    return FORECASTS.get(city.strip().lower(), f"{city}: 12 °C, cloudy, no wind")


if __name__ == "__main__":
    tools.serve(f"127.0.0.1:{int(sys.argv[1])}")
