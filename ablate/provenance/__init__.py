"""Which code and environment produced a result: fingerprints, staleness, the environment record, the disk cache of
slow figures."""
