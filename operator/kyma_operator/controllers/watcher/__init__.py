"""Watcher controller: Watcher CRs -> Istio VirtualServices in KCP, plus the agent re-render fan-out."""
