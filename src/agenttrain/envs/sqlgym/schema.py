"""The schema text that opens every SQLGym observation, as AgentGym's server writes it.

AgentGym's server (package `sqlgym==0.1.2`, `BirdDataset`) describes a database in one line
of sentences built from a BIRD `*_tables.json` entry: "<db> contains tables such as a, b.
Table a has columns such as x, y. x is the primary key. ... The x of a is the foreign key of
y of b." Names are lowercased, `*` is skipped, and a composite primary key (a nested list in
BIRD) matches no column, leaving " is the primary key.".

Its foreign-key sentences name the column one position after the right one (it indexes a
list that starts at column 1 with the column id, counted from `*`). `agentgym_foreign_keys`
keeps that for BIRD, so observations match the server's byte for byte; the bundled databases
name the right columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Schema:
    """One database's entry of a BIRD `*_tables.json` file (the fields the text uses)."""

    db_id: str
    table_names: tuple[str, ...]
    column_names: tuple[tuple[int, str], ...]
    """(table index, column name); entry 0 is (-1, "*")."""
    primary_keys: tuple[Any, ...]
    """Column ids, or lists of them for composite keys."""
    foreign_keys: tuple[tuple[int, int], ...]
    """(column id, referenced column id)."""

    @classmethod
    def from_bird(cls, entry: dict[str, Any]) -> Schema:
        return cls(
            db_id=entry["db_id"],
            table_names=tuple(entry["table_names"]),
            column_names=tuple((int(t), str(c)) for t, c in entry["column_names"]),
            primary_keys=tuple(entry["primary_keys"]),
            foreign_keys=tuple((int(a), int(b)) for a, b in entry["foreign_keys"]),
        )


def describe_schema(schema: Schema, agentgym_foreign_keys: bool = False) -> str:
    """The schema as AgentGym's server describes it (see the module docstring)."""
    tables = [name.lower() for name in schema.table_names]
    columns = [name.lower() for _, name in schema.column_names]
    sentences = [f"{schema.db_id} contains tables such as {', '.join(tables)}."]
    for table_index, table in enumerate(tables):
        own = [i for i, (t, _) in enumerate(schema.column_names) if i and t == table_index]
        keys = [columns[i] for i in own if i in schema.primary_keys]
        sentences.append(f"Table {table} has columns such as {', '.join(columns[i] for i in own)}.")
        sentences.append(f"{', '.join(keys)} is the primary key.")
    # AgentGym's list holds columns 1.. once per table and is read at the column id.
    named = columns[1:] * len(tables) if agentgym_foreign_keys else columns
    for column, referenced in schema.foreign_keys:
        first, second = (tables[schema.column_names[i][0]] for i in (column, referenced))
        sentences.append(
            f"The {named[column]} of {first} is the foreign key of {named[referenced]} of {second}."
        )
    return " ".join(sentences)


def observation(schema_text: str, question: str) -> str:
    """The first observation: the schema, a blank line, the question (AgentGym's layout)."""
    return f"{schema_text}\n\n{question}"
