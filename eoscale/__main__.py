import sys

from eoscale.cli import main

sys.exit(main())
