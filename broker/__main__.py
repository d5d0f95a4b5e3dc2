import sys

from minibroker.tools.cli import main

sys.exit(main())
