"""Kubeconfigs for tests that check a configuration without reaching an API server: valid files that
name one cluster, so a check that loads and resolves them passes, and nothing ever connects."""

UNREACHED = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""
"""A kubeconfig with one context, a token and a server nothing listens on for these tests."""
