"""`python -I -m jaxport.exporter.verify --worker CHECK DIR`: one check in a fresh process
(started by `orchestration.run_checks`; the command line is `worker.main`)."""

import sys

from jaxport.exporter.verify.worker import main

sys.exit(main(sys.argv[1:]))
