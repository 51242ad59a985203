"""Fleet rollouts: a module version change reaches the Kymas in gated waves (docs/rollouts.md).

Pure parts (waves, a Kyma's target version, the gate step) are read by every Kyma reconcile; the
leader's parts (the starter, the run controller, their sources and metrics) decide the runs.
"""
