"""``python -m noetl_cloud.openapi [folder]``: write every role's OpenAPI document (default docs/openapi)."""

import sys
from pathlib import Path

from noetl_cloud.openapi.roles import write

for path in write(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/openapi")):
    print(path)
