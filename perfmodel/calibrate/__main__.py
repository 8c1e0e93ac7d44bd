"""python -m perfmodel.calibrate measure | refit | held-out: the measuring subprocess, refitting
recorded measurements, and calibrating on one row of a steps CSV with the others held out
(docs/calibration.md)."""

import sys

if len(sys.argv) > 1 and sys.argv[1] == "held-out":
    from .steps import held_out_main
    sys.exit(held_out_main(sys.argv[2:]))

from . import measure_main

sys.exit(measure_main())
