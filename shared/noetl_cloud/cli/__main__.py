"""``python -m noetl_cloud.cli``: the ``noetl-cloud`` command."""

import sys

from noetl_cloud.cli import main

sys.exit(main())
