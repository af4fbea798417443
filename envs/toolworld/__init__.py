"""Tool-use worlds (`toolworld:` family): synthesized tasks over a database and its tools.

This package plays task records (`gemkit.records.tasks.TaskRecord`): `env.make_toolworld`
builds an env over a folder written by `gemkit synth tasks`, each category names its tools
and its verifier (`category`, `trip_planning`, ...), and `baselines` holds the scripted
agents that are the ids' experts. It makes no records: the registered ids
(`toolworld:TripPlanning-v0`, ...) and their built-in sets come from
`gemkit.synth.tasks.builtin_sets`, so no env imports synth.
"""
