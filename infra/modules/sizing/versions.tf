# Pure arithmetic: no provider, so `terraform init` needs no download and the tests apply this module
# for real (tests/unit/test_sizing.py).
terraform {
  required_version = ">= 1.5"
}
