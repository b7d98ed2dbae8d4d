import sys

from flink_jobs.cli import main

sys.exit(main())
