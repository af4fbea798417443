"""Typed, versioned records: what crosses from one part of gemkit to another as data.

One pydantic model per kind, used by the writer, the reader, the env that plays it and the
Hugging Face `datasets` export:

- `gemkit.records.qa.QARecord`: a synthesized question (`gemkit synth qa`, `qa:Synth-v0`);
- `gemkit.records.tasks.TaskRecord`: a `<database, tools, task, verifier>` tuple
  (`gemkit synth tasks`, `toolworld:` envs);
- `gemkit.records.episodes.EpisodeRecord`: one played episode (`gemkit eval`, `run --out`).

Each line carries its `schema_version`; a record of another version, or of another kind, is
refused with a message that says which (`RecordError`). `gemkit.records.export` turns a
model into `datasets` features (nested structs, not JSON strings) and back.
"""
