"""Bad input on every surface (run configuration, scenario files, ENIPool objects, CNI stdin, libnetwork
requests): refused with a clear error naming the bad field, and nothing changed. Driven by the corpus in
``corpus/`` (see README.md) and by property-based mutations of valid documents."""
