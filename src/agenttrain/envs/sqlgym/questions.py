"""The bundled questions: templates over the bundled databases' data, each with its gold SQL.

Kinds: `filter` (rows matching a value or a threshold), `count`, `group` (a count per value),
`aggregate` (average, highest, lowest, total), `order` (the highest, the lowest, the top 3)
and `join` (through the child table's foreign key). Values come from the data itself, so
every gold query returns rows; "the most"/"the highest total" questions whose answer would
be a tie are left out. Gold SQL is written the way BIRD writes it (`T1`/`T2` aliases).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from agenttrain.envs.sqlgym.databases import Database, Table, databases

AGGREGATES = (("average", "AVG"), ("highest", "MAX"), ("lowest", "MIN"), ("total", "SUM"))
VALUES_PER_CATEGORY = 3
PARENTS_PER_JOIN = 3


@dataclass(frozen=True)
class Question:
    db_id: str
    text: str
    sql: str
    kind: str


def literal(value: Any) -> str:
    """`value` as a SQL literal."""
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)


def _some(rng: random.Random, values: Sequence[Any], count: int) -> list[Any]:
    distinct = sorted(set(values))
    return rng.sample(distinct, min(count, len(distinct)))


def _singular(label_plural: str) -> str:
    return label_plural.removesuffix("s")


def table_questions(db: Database, table: Table, rng: random.Random) -> Iterator[Question]:
    """Questions on one table alone."""
    t, label, noun = table.name, table.label, table.plural

    def ask(text: str, sql: str, kind: str) -> Question:
        return Question(db.db_id, text, sql, kind)

    for column, phrase in table.categories.items():
        for value in _some(rng, table.values(column), VALUES_PER_CATEGORY):
            where = f"WHERE {column} = {literal(value)}"
            yield ask(
                f"List the {table.label_plural} of all {noun} whose {phrase} is {value}.",
                f"SELECT {label} FROM {t} {where}",
                "filter",
            )
            yield ask(
                f"How many {noun} have the {phrase} {value}?",
                f"SELECT COUNT(*) FROM {t} {where}",
                "count",
            )
        yield ask(
            f"How many {noun} are there for each {phrase}? Give the {phrase} and the count.",
            f"SELECT {column}, COUNT(*) FROM {t} GROUP BY {column}",
            "group",
        )
    for column, phrase in table.measures.items():
        yield from _measure_questions(db, table, column, phrase, rng)


def _measure_questions(
    db: Database, table: Table, column: str, phrase: str, rng: random.Random
) -> Iterator[Question]:
    t, label, noun = table.name, table.label, table.plural
    one = _singular(table.label_plural)
    for word, order in (("highest", "DESC"), ("lowest", "ASC")):
        yield Question(
            db.db_id,
            f"Which {table.singular} has the {word} {phrase}? Give the {one}.",
            f"SELECT {label} FROM {t} ORDER BY {column} {order} LIMIT 1",
            "order",
        )
    yield Question(
        db.db_id,
        f"List the {table.label_plural} of the 3 {noun} with the highest {phrase}.",
        f"SELECT {label} FROM {t} ORDER BY {column} DESC LIMIT 3",
        "order",
    )
    ranked = sorted(table.values(column))
    for word, operator, value in (
        ("greater", ">", ranked[len(ranked) * 3 // 4]),
        ("less", "<", ranked[len(ranked) // 4]),
    ):
        yield Question(
            db.db_id,
            f"List the {table.label_plural} of the {noun} whose {phrase} is {word} than {value}.",
            f"SELECT {label} FROM {t} WHERE {column} {operator} {value}",
            "filter",
        )
    for word, function in AGGREGATES:
        if table.categories:
            category, category_phrase = rng.choice(sorted(table.categories.items()))
            value = rng.choice(table.values(category))
            text = f"What is the {word} {phrase} of the {noun} whose {category_phrase} is {value}?"
            sql = f"SELECT {function}({column}) FROM {t} WHERE {category} = {literal(value)}"
        else:
            text = f"What is the {word} {phrase} of all {noun}?"
            sql = f"SELECT {function}({column}) FROM {t}"
        yield Question(db.db_id, text, sql, "aggregate")


def join_questions(db: Database, rng: random.Random) -> Iterator[Question]:
    """Questions that need the child table joined to its parent."""
    child, parent, link = db.child, db.parent, db.child.link
    assert link is not None
    join = (
        f"FROM {child.name} AS T1 INNER JOIN {parent.name} AS T2 "
        f"ON T1.{link.column} = T2.{parent.key}"
    )
    children = Counter(child.values(link.column))
    with_children = [row for row in parent.rows if children[row[0]]]
    name_of = parent.columns.index(parent.label)

    def ask(text: str, sql: str) -> Question:
        return Question(db.db_id, text, sql, "join")

    for row in rng.sample(with_children, min(PARENTS_PER_JOIN, len(with_children))):
        name = row[name_of]
        yield ask(
            f"List the {child.label_plural} of the {child.plural} {link.verb} {name}.",
            f"SELECT T1.{child.label} {join} WHERE T2.{parent.label} = {literal(name)}",
        )
    for column, phrase in child.measures.items():
        for row in rng.sample(with_children, min(2, len(with_children))):
            name = row[name_of]
            yield ask(
                f"What is the average {phrase} of the {child.plural} {link.verb} {name}?",
                f"SELECT AVG(T1.{column}) {join} WHERE T2.{parent.label} = {literal(name)}",
            )
    for column, phrase in parent.categories.items():
        index = parent.columns.index(column)
        for value in _some(rng, [row[index] for row in with_children], 2):
            yield ask(
                f"How many {child.plural} are {link.verb} {parent.plural} whose {phrase} is "
                f"{value}?",
                f"SELECT COUNT(*) {join} WHERE T2.{column} = {literal(value)}",
            )
    if _unique_top(children):
        yield ask(
            f"Which {parent.singular} has the most {child.plural}? Give the {parent.label}.",
            f"SELECT T2.{parent.label} {join} GROUP BY T2.{parent.key} "
            f"ORDER BY COUNT(*) DESC LIMIT 1",
        )
    for column, phrase in child.measures.items():
        totals: Counter[Any] = Counter()
        for key, amount in zip(child.values(link.column), child.values(column), strict=True):
            totals[key] += amount
        if _unique_top(totals):
            yield ask(
                f"Which {parent.singular} has the highest total {phrase} over its "
                f"{child.plural}? Give the {parent.label}.",
                f"SELECT T2.{parent.label} {join} GROUP BY T2.{parent.key} "
                f"ORDER BY SUM(T1.{column}) DESC LIMIT 1",
            )


def _unique_top(counts: Counter[Any]) -> bool:
    top = counts.most_common(2)
    return len(top) == 1 or (len(top) == 2 and top[0][1] != top[1][1])


@cache
def questions() -> tuple[Question, ...]:
    """Every bundled question, in a fixed order (the task ids)."""
    found: dict[tuple[str, str], Question] = {}
    for db in databases().values():
        rng = random.Random(f"sqlgym/questions/{db.db_id}")
        asked = [
            *table_questions(db, db.parent, rng),
            *table_questions(db, db.child, rng),
            *join_questions(db, rng),
        ]
        for question in asked:
            found.setdefault((question.db_id, question.text), question)
    return tuple(found.values())
