"""`python -m gemkit` runs the CLI."""

import sys

from gemkit.cli import main

sys.exit(main())
