module github.com/kyma-py/lifecycle/benchmarks/admission_client

go 1.26.0
