"""The one game the stand-in `alfworld` plays in these tests: put a mug in the coffee machine."""

INTRO = (
    "-= Welcome to TextWorld, ALFRED! =-\n\n"
    "You are in the middle of a room. Looking quickly around you, you see a countertop 1 "
    "and a coffeemachine 1.\n\nYour task is to: put a mug in coffeemachine."
)
COMMANDS = ["go to countertop 1", "go to coffeemachine 1", "inventory", "look"]
ANSWERS = {
    "go to countertop 1": ["You arrive at loc 3. On the countertop 1, you see a mug 1.", False],
    "take mug 1 from countertop 1": ["You pick up the mug 1 from the countertop 1.", False],
    "go to coffeemachine 1": [
        "You arrive at loc 7. On the coffeemachine 1, you see nothing.",
        False,
    ],
    "put mug 1 in/on coffeemachine 1": ["You put the mug 1 in/on the coffeemachine 1.", True],
}
SOLUTION = list(ANSWERS)
