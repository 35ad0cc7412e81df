"""The configuration vocabulary and the one reader of what people write: below everything else.

* :mod:`~eni_ipam.config.schema` — ``ConfigModel`` and its types (``Duration``, ``Cidr``, bounded
  numbers, names), strict validation and the one :class:`~eni_ipam.errors.ConfigError` naming the
  field's path. Every configuration model is declared with it: the domain's settings and node spec,
  the providers' sections, the run and agent configurations, scenario files.
* :mod:`~eni_ipam.config.files` — reading YAML and JSON files safely (duplicate keys, non-regular
  files and oversized documents refused).

Invariant: nothing here knows the domain. It imports only :mod:`eni_ipam.errors` and libraries; the
layers contract in pyproject.toml keeps every arrow pointing at it, none out of it.
"""
