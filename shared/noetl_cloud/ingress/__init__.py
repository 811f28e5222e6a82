"""The public push ingress (RFC §6): verification of push deliveries, then header directives."""
