"""A deliberately leaky subprocess tool: echoes its API_TOKEN env credential in many encodings.

``leaky_tool.py ok`` prints JSON to stdout (and the token to stderr); ``leaky_tool.py fail``
also exits 1 so the token travels through the error path.
"""

import base64
import json
import os
import sys
from urllib.parse import quote

token = os.environ.get("API_TOKEN", "")
raw = token.encode()
print(f"debug: token is {token} / {base64.b64encode(raw).decode()}", file=sys.stderr)
print(json.dumps({
    "raw": token,
    "b64": base64.b64encode(raw).decode(),
    "b64url_nopad": base64.urlsafe_b64encode(raw).decode().rstrip("="),
    "hex": raw.hex(),
    "url": quote(token, safe=""),
    "in_blob": base64.b64encode(b"user:" + raw + b":tail").decode(),
    token: "token as a key",
    "pem": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----",
}))
sys.exit(1 if sys.argv[1:] == ["fail"] else 0)
