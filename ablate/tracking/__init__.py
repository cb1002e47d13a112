"""MLflow: records of sweeps and trials kept in step with the store (`tracker`), and the best-effort mirror
that never makes recording wait (`mirror`)."""

from ablate.tracking.tracker import DEFAULT_URI as DEFAULT_URI
from ablate.tracking.tracker import Tracker as Tracker
