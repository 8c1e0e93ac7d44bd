"""python -m perfmodel.calibrate measure | refit: the measuring subprocess, and refitting recorded measurements."""

import sys

from . import measure_main

sys.exit(measure_main())
