"""Fleet rollouts of module versions in gated waves (docs/rollouts.md).

Why a package: a version change reaches the fleet wave by wave, and three kinds of code must give
the same answers without talking to each other: every Kyma reconcile (which version does this Kyma
get now?), the rollout leader (may the next wave go?) and the CLI (why is this Kyma held?). The
answers are pure functions kept here: ``waves`` (which wave a Kyma is in, whether the frontier
covers it), ``target`` (the version a Kyma gets; ``cli/rolloutkyma.py`` words it for ``--kyma``),
``selection`` (which policy governs a change, which run is in force), ``lookup`` (``RunIndex``:
the ``RolloutLookup`` over an informer's listing, invalid runs skipped), ``classify`` (a member
Kyma's class and deadline) and ``progress`` (one gate step). They read the API models and nothing
else: no I/O, no clock (``now`` is passed in). This package sits below
``kyma_operator.controllers`` in the import layering (module resolution calls ``target``), so it
imports nothing from the controllers.
"""
