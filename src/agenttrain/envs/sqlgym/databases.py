"""The bundled databases: five small themed SQLite databases, generated at load time.

Rows come from the word lists in `vocabulary.json` and a random generator seeded by the
database's name, so every machine builds the same data and no binary database ships. Each
database is a parent table and a child table that points to it; every measure column
(price, goals, ...) holds distinct values, so "the highest" and "the 3 lowest" have one
answer.
"""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from agenttrain.envs.sqlgym.schema import Schema

Row = tuple[Any, ...]


@dataclass(frozen=True)
class Link:
    """A child table's foreign key to its parent, and how questions phrase it."""

    column: str
    parent: str
    verb: str
    """How a child relates to its parent in a question: "written by"."""


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[str, ...]
    rows: tuple[Row, ...]
    singular: str
    plural: str
    label: str
    """The column that names a row (name, title, flight_number)."""
    label_plural: str
    """How questions ask for that column: "titles"."""
    categories: Mapping[str, str] = field(default_factory=dict)
    """Columns with a few repeated values, and their wording: {"genre": "genre"}."""
    measures: Mapping[str, str] = field(default_factory=dict)
    """Numeric columns with distinct values, and their wording: {"pages": "number of pages"}."""
    link: Link | None = None

    @property
    def key(self) -> str:
        return self.columns[0]

    def values(self, column: str) -> list[Any]:
        index = self.columns.index(column)
        return [row[index] for row in self.rows]

    def column_type(self, column: str) -> str:
        return "INTEGER" if isinstance(self.values(column)[0], int) else "TEXT"


@dataclass(frozen=True)
class Database:
    db_id: str
    parent: Table
    child: Table

    @property
    def tables(self) -> tuple[Table, Table]:
        return (self.parent, self.child)

    def schema(self) -> Schema:
        """The database as a BIRD `tables.json` entry describes one."""
        columns: list[tuple[int, str]] = [(-1, "*")]
        for index, table in enumerate(self.tables):
            columns += [(index, column) for column in table.columns]
        column_id = {(self.tables[t].name, name): i for i, (t, name) in enumerate(columns) if i}
        link = self.child.link
        assert link is not None
        return Schema(
            db_id=self.db_id,
            table_names=tuple(table.name for table in self.tables),
            column_names=tuple(columns),
            primary_keys=tuple(column_id[(table.name, table.key)] for table in self.tables),
            foreign_keys=(
                (
                    column_id[(self.child.name, link.column)],
                    column_id[(link.parent, self.parent.key)],
                ),
            ),
        )

    def create_in(self, connection: sqlite3.Connection) -> None:
        """Create and fill the tables in an empty database."""
        for table in self.tables:
            definitions = [f"{table.key} INTEGER PRIMARY KEY"] + [
                f"{column} {table.column_type(column)}" for column in table.columns[1:]
            ]
            if table.link is not None:
                definitions.append(
                    f"FOREIGN KEY ({table.link.column}) REFERENCES "
                    f"{table.link.parent}({self.parent.key})"
                )
            connection.execute(f"CREATE TABLE {table.name} ({', '.join(definitions)})")
            marks = ", ".join("?" for _ in table.columns)
            connection.executemany(f"INSERT INTO {table.name} VALUES ({marks})", table.rows)
        connection.commit()


@cache
def vocabulary() -> dict[str, list[str]]:
    text = resources.files("agenttrain.envs.sqlgym").joinpath("vocabulary.json").read_text()
    return json.loads(text)


def _people(rng: random.Random, count: int) -> list[str]:
    words = vocabulary()
    everyone = [f"{first} {last}" for first in words["first_names"] for last in words["last_names"]]
    return rng.sample(everyone, count)


def _distinct(rng: random.Random, low: int, high: int, count: int, step: int = 1) -> list[int]:
    return rng.sample(range(low, high, step), count)


def _pick(rng: random.Random, key: str, count: int) -> list[str]:
    return [rng.choice(vocabulary()[key]) for _ in range(count)]


def _rows(*columns: Sequence[Any]) -> tuple[Row, ...]:
    """Rows from equally long columns."""
    return tuple(zip(*columns, strict=True))


def _ids(count: int) -> range:
    return range(1, count + 1)


def bookshop(rng: random.Random) -> Database:
    words = vocabulary()
    n_authors, n_books = 12, 40
    authors = _rows(
        _ids(n_authors),
        _people(rng, n_authors),
        _pick(rng, "countries", n_authors),
        _distinct(rng, 1940, 1996, n_authors),
    )
    titles = [f"The {a} {n}" for a in words["title_adjectives"] for n in words["title_nouns"]]
    books = _rows(
        _ids(n_books),
        rng.sample(titles, n_books),
        [rng.randint(1, n_authors) for _ in range(n_books)],
        _pick(rng, "genres", n_books),
        _distinct(rng, 5, 80, n_books),
        _distinct(rng, 90, 900, n_books),
    )
    return Database(
        "bookshop",
        Table(
            "authors",
            ("author_id", "name", "country", "birth_year"),
            authors,
            "author",
            "authors",
            "name",
            "names",
            categories={"country": "country"},
            measures={"birth_year": "birth year"},
        ),
        Table(
            "books",
            ("book_id", "title", "author_id", "genre", "price", "pages"),
            books,
            "book",
            "books",
            "title",
            "titles",
            categories={"genre": "genre"},
            measures={"price": "price", "pages": "number of pages"},
            link=Link("author_id", "authors", "written by"),
        ),
    )


def school(rng: random.Random) -> Database:
    n_teachers, n_students = 10, 45
    teachers = _rows(
        _ids(n_teachers),
        _people(rng, n_teachers),
        _pick(rng, "subjects", n_teachers),
        _distinct(rng, 1, 36, n_teachers),
        _distinct(rng, 30000, 90000, n_teachers, step=500),
    )
    students = _rows(
        _ids(n_students),
        _people(rng, n_students),
        [rng.randint(1, n_teachers) for _ in range(n_students)],
        _pick(rng, "grade_levels", n_students),
        _pick(rng, "cities", n_students),
        _distinct(rng, 400, 1000, n_students),
        _distinct(rng, 0, 60, n_students),
    )
    return Database(
        "school",
        Table(
            "teachers",
            ("teacher_id", "name", "subject", "years_experience", "salary"),
            teachers,
            "teacher",
            "teachers",
            "name",
            "names",
            categories={"subject": "subject"},
            measures={"years_experience": "years of experience", "salary": "salary"},
        ),
        Table(
            "students",
            ("student_id", "name", "teacher_id", "grade_level", "city", "exam_score", "absences"),
            students,
            "student",
            "students",
            "name",
            "names",
            categories={"grade_level": "grade level", "city": "city"},
            measures={"exam_score": "exam score", "absences": "number of absences"},
            link=Link("teacher_id", "teachers", "taught by"),
        ),
    )


def clinic(rng: random.Random) -> Database:
    n_doctors, n_patients = 10, 45
    doctors = _rows(
        _ids(n_doctors),
        _people(rng, n_doctors),
        _pick(rng, "specialties", n_doctors),
        _distinct(rng, 1, 41, n_doctors),
        _distinct(rng, 50, 300, n_doctors, step=5),
    )
    patients = _rows(
        _ids(n_patients),
        _people(rng, n_patients),
        [rng.randint(1, n_doctors) for _ in range(n_patients)],
        _pick(rng, "cities", n_patients),
        _distinct(rng, 1, 96, n_patients),
        _distinct(rng, 100, 5000, n_patients, step=10),
    )
    return Database(
        "clinic",
        Table(
            "doctors",
            ("doctor_id", "name", "specialty", "years_experience", "consultation_fee"),
            doctors,
            "doctor",
            "doctors",
            "name",
            "names",
            categories={"specialty": "specialty"},
            measures={
                "years_experience": "years of experience",
                "consultation_fee": "consultation fee",
            },
        ),
        Table(
            "patients",
            ("patient_id", "name", "doctor_id", "city", "age", "bill"),
            patients,
            "patient",
            "patients",
            "name",
            "names",
            categories={"city": "city"},
            measures={"age": "age", "bill": "bill"},
            link=Link("doctor_id", "doctors", "treated by"),
        ),
    )


def airline(rng: random.Random) -> Database:
    carriers = vocabulary()["airlines"]
    n_flights = 45
    airlines = _rows(
        _ids(len(carriers)),
        carriers,
        _pick(rng, "countries", len(carriers)),
        _distinct(rng, 1920, 2016, len(carriers)),
        _distinct(rng, 10, 400, len(carriers)),
    )
    operators = [rng.randint(1, len(carriers)) for _ in range(n_flights)]
    numbers = _distinct(rng, 100, 1000, n_flights)
    routes = [rng.sample(vocabulary()["airports"], 2) for _ in range(n_flights)]
    flights = _rows(
        _ids(n_flights),
        [_flight_number(carriers[o - 1], n) for o, n in zip(operators, numbers, strict=True)],
        operators,
        [origin for origin, _ in routes],
        [destination for _, destination in routes],
        _distinct(rng, 200, 9000, n_flights),
        _distinct(rng, 50, 1500, n_flights),
    )
    return Database(
        "airline",
        Table(
            "airlines",
            ("airline_id", "name", "country", "founded", "fleet_size"),
            airlines,
            "airline",
            "airlines",
            "name",
            "names",
            categories={"country": "country"},
            measures={"founded": "founding year", "fleet_size": "fleet size"},
        ),
        Table(
            "flights",
            (
                "flight_id",
                "flight_number",
                "airline_id",
                "origin",
                "destination",
                "distance_km",
                "price",
            ),
            flights,
            "flight",
            "flights",
            "flight_number",
            "flight numbers",
            categories={"origin": "origin airport", "destination": "destination airport"},
            measures={"distance_km": "distance in kilometres", "price": "price"},
            link=Link("airline_id", "airlines", "operated by"),
        ),
    )


def _flight_number(carrier: str, number: int) -> str:
    """A two-letter carrier code and a number: "Coral Wings", 417 -> "CW417"."""
    initials = "".join(word[0] for word in carrier.split()) + carrier[1]
    return f"{initials[:2].upper()}{number}"


def league(rng: random.Random) -> Database:
    words = vocabulary()
    n_teams, n_players = 8, 48
    cities = rng.sample(words["cities"], n_teams)
    mascots = rng.sample(words["team_mascots"], n_teams)
    teams = _rows(
        _ids(n_teams),
        [f"{city} {mascot}" for city, mascot in _rows(cities, mascots)],
        cities,
        _distinct(rng, 1880, 1991, n_teams),
        _distinct(rng, 5000, 80000, n_teams, step=500),
    )
    players = _rows(
        _ids(n_players),
        _people(rng, n_players),
        [rng.randint(1, n_teams) for _ in range(n_players)],
        _pick(rng, "positions", n_players),
        _pick(rng, "countries", n_players),
        _distinct(rng, 0, 90, n_players),
        _distinct(rng, 1, 100, n_players),
    )
    return Database(
        "league",
        Table(
            "teams",
            ("team_id", "name", "city", "founded", "stadium_capacity"),
            teams,
            "team",
            "teams",
            "name",
            "names",
            measures={"founded": "founding year", "stadium_capacity": "stadium capacity"},
        ),
        Table(
            "players",
            ("player_id", "name", "team_id", "position", "nationality", "goals", "shirt_number"),
            players,
            "player",
            "players",
            "name",
            "names",
            categories={"position": "position", "nationality": "nationality"},
            measures={"goals": "number of goals"},
            link=Link("team_id", "teams", "playing for"),
        ),
    )


BUILDERS: Sequence[Callable[[random.Random], Database]] = (
    bookshop,
    school,
    clinic,
    airline,
    league,
)


@cache
def databases() -> dict[str, Database]:
    """Every bundled database by name, built from its own seed."""
    built = (build(random.Random(f"sqlgym/{build.__name__}")) for build in BUILDERS)
    return {database.db_id: database for database in built}
