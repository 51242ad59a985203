"""The operator's controllers: ``kyma``, ``manifest`` (+ ``helm``) and ``watcher``, one reconciler
each with the sources that enqueue it (``setup``); ``shared_informers`` builds the KCP informers
several of them read, ``sharding`` gates them by shard (docs/architecture.md, "The controllers").
"""
