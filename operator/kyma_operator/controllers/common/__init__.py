"""What the Kyma and Manifest controllers share: config base, report model, settle re-reads, the
heartbeat view, the drift check. Sibling controllers import from here, never from each other."""
