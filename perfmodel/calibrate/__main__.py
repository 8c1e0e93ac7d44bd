"""python -m perfmodel.calibrate measure | refit: the measuring subprocess, and refitting recorded measurements."""

import sys

from . import _measure_main

sys.exit(_measure_main())
