"""Real local Kubernetes control planes for tests and for the local run: etcd + kube-apiservers."""
