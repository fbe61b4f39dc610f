"""The bundled SearchQA corpus and questions: a small invented archipelago, Ostmere.

Every passage describes an invented place, person, river, festival or device, so no answer
can come from a model's memory of Wikipedia: it has to be searched. The text is generated
from the templates below with a fixed seed; `python -m agenttrain.envs.searchqa.bundled`
writes `corpus.jsonl` and `questions.jsonl` beside this file (a test checks they match).
Passages of one kind share their wording, so every question has look-alike distractors.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agenttrain.envs.searchqa.questions import BUNDLED_CORPUS, BUNDLED_QUESTIONS

SEED = 14
TEST_EVERY = 4
"""Every 4th question is a test question; the rest train."""

ONSETS = [
    "b",
    "d",
    "f",
    "g",
    "h",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "br",
    "dr",
    "gr",
    "kl",
    "sk",
    "st",
    "th",
    "tr",
    "w",
    "z",
]
VOWELS = ["a", "e", "i", "o", "u", "ae", "ei", "ou"]
CODAS = ["", "n", "r", "l", "s", "th", "nd", "rk", "ld", "st", "m", "sk"]
TOWN_ENDINGS = ["holt", "mere", "wick", "stad", "by", "haven", "ford", "moor", "dale", "port"]

ISLANDS = ["Varn", "Ostel", "Brisk", "Hallow", "Teme", "Quill"]
PRODUCTS = [
    "blue glass",
    "copper bells",
    "salt cod",
    "wool sails",
    "rope ladders",
    "honey wax",
    "slate tiles",
    "fishing nets",
    "clay lamps",
    "pine tar",
    "kelp paper",
    "tin whistles",
]
PROFESSIONS = [
    "cartographer",
    "shipwright",
    "astronomer",
    "glassblower",
    "botanist",
    "poet",
    "lighthouse keeper",
    "weaver",
    "composer",
    "surveyor",
    "beekeeper",
    "bridge builder",
]
WORKS = [
    "a map of the northern reefs",
    "a book of sea songs",
    "a catalogue of island mosses",
    "a lighthouse lens",
    "a survey of the tidal flats",
    "a calendar of the spring tides",
    "a hymn for the harvest",
    "a bridge of black stone",
    "a treatise on hive keeping",
    "a tapestry of the first fleet",
]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
FESTIVAL_KINDS = [
    "Lantern Night",
    "Net Mending Fair",
    "Salt Walk",
    "Bell Race",
    "Kite Day",
    "Herring Feast",
    "Bonfire Vigil",
]
HONOURS = [
    "the return of the fishing fleet",
    "the first frost",
    "the longest day",
    "the founding of the town",
    "the end of the harvest",
    "the spring thaw",
]
SEAS = ["Grey Sound", "Amber Sea", "Narrow Strait", "Cold Bay"]
DEVICE_KINDS = [
    "tide loom",
    "fog horn",
    "salt press",
    "star compass",
    "rope winch",
    "kelp mill",
    "wind clock",
    "net shuttle",
    "lamp bellows",
    "depth sounder",
]
DEVICE_USES = [
    "to weave sailcloth while the tide turns a wheel",
    "to warn ships away from the reefs in fog",
    "to squeeze brine out of sea salt",
    "to find north under a clouded sky",
    "to haul boats up the shingle",
    "to grind dried kelp into paper pulp",
]


@dataclass
class Bundle:
    passages: list[dict[str, str]] = field(default_factory=list)
    questions: list[dict[str, object]] = field(default_factory=list)

    def passage(self, title: str, text: str) -> str:
        passage_id = f"ostmere-{len(self.passages):03d}"
        self.passages.append({"id": passage_id, "title": title, "text": text})
        return passage_id

    def ask(self, question: str, answers: list[str], gold: str) -> None:
        self.questions.append({"question": question, "answers": answers, "gold": gold})


class Names:
    """Invented names, never the same twice."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def _syllables(self, count: int) -> str:
        parts = [self.rng.choice(ONSETS) + self.rng.choice(VOWELS) for _ in range(count)]
        return "".join(parts) + self.rng.choice(CODAS)

    def _fresh(self, make: Callable[[], str]) -> str:
        while True:
            name = make().capitalize()
            if name not in self.used:
                self.used.add(name)
                return name

    def person(self) -> str:
        first = self._fresh(lambda: self._syllables(2))
        return f"{first} {self._fresh(lambda: self._syllables(self.rng.randint(1, 2)))}"

    def town(self) -> str:
        return self._fresh(lambda: self._syllables(1) + self.rng.choice(TOWN_ENDINGS))

    def word(self) -> str:
        return self._fresh(lambda: self._syllables(self.rng.randint(1, 2)))


def build() -> Bundle:
    """The whole bundle, the same on every machine."""
    rng = random.Random(SEED)
    names = Names(rng)
    bundle = Bundle()
    towns = [names.town() for _ in range(80)]
    rivers = [names.word() for _ in range(40)]
    for index, town in enumerate(towns):
        founder, year = names.person(), rng.randint(1180, 1790)
        island, product = ISLANDS[index % len(ISLANDS)], rng.choice(PRODUCTS)
        river = rivers[index % len(rivers)]
        texts = [
            f"{town} is a harbour town on the island of {island}. It was founded in {year} by "
            f"{founder}, and its workshops are known for {product}. The {river} river runs "
            "through its old quarter.",
            f"The town of {town} lies where the {river} river meets the coast of {island}. "
            f"{founder} founded it in {year}; today it trades mostly in {product}.",
        ]
        gold = bundle.passage(town, texts[index % 2])
        bundle.ask(f"Who founded the town of {town}?", [founder], gold)
        bundle.ask(f"What are the workshops of {town} known for?", [product], gold)
    for index in range(80):
        person, town = names.person(), towns[(index * 7) % len(towns)]
        profession, work = rng.choice(PROFESSIONS), rng.choice(WORKS)
        year = rng.randint(1600, 1900)
        texts = [
            f"{person} was a {profession} born in {town} in {year}. Islanders remember "
            f"{person.split()[0]} for {work}, which is still kept in the town hall.",
            f"Born in {year} in the town of {town}, {person} worked as a {profession} and is "
            f"best known for {work}.",
        ]
        gold = bundle.passage(person, texts[index % 2])
        bundle.ask(f"What was the profession of {person}?", [profession], gold)
    for index, river in enumerate(rivers):
        length, peak, sea = rng.randint(9, 140), names.word(), SEAS[index % len(SEAS)]
        gold = bundle.passage(
            f"{river} River",
            f"The {river} river rises on Mount {peak} and flows for {length} kilometres before "
            f"it reaches the {sea}. Salmon run up the {river} every autumn.",
        )
        bundle.ask(
            f"How long is the {river} river?",
            [f"{length} kilometres", f"{length} km", str(length)],
            gold,
        )
        bundle.ask(f"On which mountain does the {river} river rise?", [f"Mount {peak}"], gold)
    for index in range(50):
        town = towns[(index * 3 + 1) % len(towns)]
        kind = FESTIVAL_KINDS[index % len(FESTIVAL_KINDS)]
        month, honour = rng.choice(MONTHS), rng.choice(HONOURS)
        title = f"{kind} of {town}"
        gold = bundle.passage(
            title,
            f"The {title} is held every {month} to mark {honour}. Families from across the "
            "island gather on the quay, and the evening ends with music.",
        )
        bundle.ask(f"In which month is the {title} held?", [month], gold)
    for index in range(50):
        kind = DEVICE_KINDS[index % len(DEVICE_KINDS)]
        device = f"{names.word()} {kind}"
        inventor, year = names.person(), rng.randint(1650, 1899)
        use = rng.choice(DEVICE_USES)
        gold = bundle.passage(
            device.capitalize(),
            f"The {device} is a machine built {use}. It was invented by {inventor} in {year} "
            "and copies of it were soon made on every island.",
        )
        bundle.ask(f"Who invented the {device}?", [inventor], gold)
    return bundle


def records(bundle: Bundle) -> Iterator[tuple[Path, list[dict[str, object]]]]:
    yield BUNDLED_CORPUS, list(bundle.passages)
    split_questions = [
        {**q, "split": "test" if i % TEST_EVERY == TEST_EVERY - 1 else "train"}
        for i, q in enumerate(bundle.questions)
    ]
    yield BUNDLED_QUESTIONS, split_questions


def jsonl(rows: list[dict[str, object]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def main() -> None:
    for path, rows in records(build()):
        path.write_text(jsonl(rows), encoding="utf-8")
        print(f"{path}: {len(rows)} records")


if __name__ == "__main__":
    main()
