import sys

from distprompt.cli import main

sys.exit(main())
