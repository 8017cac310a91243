"""A real MCP upstream that sends a call more than it should (stdio by default, ``--http PORTFILE
json|sse`` for streamable HTTP answering with JSON bodies or SSE streams; ``--endless PIDFILE``
for a stdio process that writes without end, see ``endless``).

Tools: ``big(size)``: a text of ``size`` bytes as the one content block (and ``big <size>`` to
stderr), so the reply is one message of about that size (one stdout line, one body or one SSE
event); ``chatty(count, size)``: ``count`` log notifications of ``size`` bytes each, then
``done`` (many messages, each small).
"""

import os
import socket
import subprocess
import sys
import warnings

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent

warnings.simplefilter("ignore")  # the logging capability is deprecated; chatty uses it all the same
server = MCPServer("flood-upstream")


@server.tool(description="A text of the given size.")
def big(size: int) -> CallToolResult:
    print(f"big {size}", file=sys.stderr, flush=True)
    return CallToolResult(content=[TextContent(type="text", text="x" * size)])


@server.tool(description="Many log messages, then done.")
async def chatty(count: int, size: int, ctx: Context) -> str:
    for _ in range(count):
        await ctx.log("info", "y" * size)
    return "done"


def endless(pid_file: str) -> None:
    """Not an MCP server at all: starts a child that sleeps in this process's group, writes both
    pids to ``pid_file``, then writes to stdout without end and never a newline."""
    child = subprocess.Popen(["sleep", "600"], stdout=subprocess.DEVNULL)
    with open(pid_file + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    os.replace(pid_file + ".tmp", pid_file)
    os.write(1, b'{"jsonrpc": "2.0", "id": 0, "result": {"pad": "')
    while True:
        os.write(1, b"z" * 65536)


def serve_http(port_file: str, json_response: bool) -> None:
    """Streamable HTTP on 127.0.0.1, on a port bound first; written to ``port_file`` once listening."""
    import anyio
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    with open(port_file + ".tmp", "w") as f:
        f.write(str(sock.getsockname()[1]))
    os.replace(port_file + ".tmp", port_file)
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=["127.0.0.1:*"],
                                         allowed_origins=["http://127.0.0.1:*"])
    app = server.streamable_http_app(transport_security=security, json_response=json_response)
    anyio.run(uvicorn.Server(uvicorn.Config(app, log_level="warning")).serve, [sock])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        serve_http(sys.argv[2], sys.argv[3] == "json")
    elif sys.argv[1:2] == ["--endless"]:
        endless(sys.argv[2])
    else:
        server.run("stdio")
