"""Prints the size of `tools/list` (the JSON of every tool: name, description, schemas,
annotations) as a client receives it: what every agent pays in every prompt.

Usage: tools_size.py URL
"""

import asyncio
import json
import sys

from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main(url: str) -> None:
    async with Client(streamable_http_client(url), mode="legacy") as c:
        tools = (await c.list_tools()).tools
        docs = [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in tools]
        total = len(json.dumps(docs, separators=(",", ":")))
        print(f"{len(tools)} tools, {total} bytes of JSON")
        for d in sorted(docs, key=lambda d: -len(json.dumps(d, separators=(",", ":")))):
            print(f"  {d['name']:<26} {len(json.dumps(d, separators=(',', ':'))):>6}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
