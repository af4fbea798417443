"""The reasoning-gym dataset names, as a static table so registering `rg:` ids is instant.

`import reasoning_gym` takes about two seconds (it builds every generator), far too slow for
`gemkit list`; this table is checked against the installed registry by the tests. Regenerate it
after upgrading reasoning-gym with `python -m gemkit.envs.reasoning_gym.names`.
"""

from __future__ import annotations

from pathlib import Path

#: reasoning-gym version the table was generated from
GENERATED_FROM = "0.1.23"

#: dataset name -> category (the reasoning_gym subpackage that defines it)
DATASETS: dict[str, str] = {
    # BEGIN GENERATED
    "ab": "algorithmic",
    "acre": "induction",
    "advanced_geometry": "geometry",
    "aiw": "logic",
    "arc_1d": "arc",
    "arc_agi": "arc",
    "base_conversion": "algorithmic",
    "basic_arithmetic": "arithmetic",
    "bf": "code",
    "binary_alternation": "algorithmic",
    "binary_matrix": "algorithmic",
    "bitwise_arithmetic": "arithmetic",
    "boxnet": "games",
    "caesar_cipher": "algorithmic",
    "calendar_arithmetic": "arithmetic",
    "chain_sum": "arithmetic",
    "circuit_logic": "logic",
    "codeio": "code",
    "color_cube_rotation": "cognition",
    "complex_arithmetic": "algebra",
    "composite": "composite",
    "count_bits": "arithmetic",
    "count_primes": "algorithmic",
    "countdown": "games",
    "course_schedule": "graphs",
    "cryptarithm": "algorithmic",
    "decimal_arithmetic": "arithmetic",
    "decimal_chain_sum": "arithmetic",
    "dice": "arithmetic",
    "emoji_mystery": "games",
    "family_relationships": "graphs",
    "figlet_font": "cognition",
    "fraction_simplification": "arithmetic",
    "futoshiki": "games",
    "game_of_life": "algorithmic",
    "game_of_life_halting": "algorithmic",
    "gcd": "arithmetic",
    "graph_color": "algorithmic",
    "group_anagrams": "algorithmic",
    "gsm_symbolic": "arithmetic",
    "intermediate_integration": "algebra",
    "isomorphic_strings": "algorithmic",
    "jugs": "algorithmic",
    "kakurasu": "games",
    "knight_swap": "games",
    "knights_knaves": "logic",
    "largest_island": "graphs",
    "lcm": "arithmetic",
    "leg_counting": "arithmetic",
    "letter_counting": "algorithmic",
    "letter_jumble": "algorithmic",
    "list_functions": "induction",
    "mahjong_puzzle": "games",
    "manipulate_matrix": "algorithmic",
    "maze": "games",
    "mini_sudoku": "games",
    "modulo_grid": "cognition",
    "n_queens": "games",
    "needle_haystack": "cognition",
    "number_filtering": "algorithmic",
    "number_format": "arithmetic",
    "number_sequence": "cognition",
    "number_sorting": "algorithmic",
    "palindrome_generation": "algorithmic",
    "palindrome_partitioning": "algorithmic",
    "polynomial_equations": "algebra",
    "polynomial_multiplication": "algebra",
    "pool_matrix": "algorithmic",
    "power_function": "arithmetic",
    "prime_factorization": "arithmetic",
    "products": "arithmetic",
    "propositional_logic": "logic",
    "puzzle24": "games",
    "quantum_lock": "graphs",
    "ransom_note": "algorithmic",
    "rearc": "arc",
    "rectangle_count": "cognition",
    "rotate_matrix": "algorithmic",
    "rotten_oranges": "algorithmic",
    "rubiks_cube": "cognition",
    "rush_hour": "games",
    "self_reference": "logic",
    "sentence_reordering": "algorithmic",
    "shortest_path": "graphs",
    "simple_equations": "algebra",
    "simple_geometry": "geometry",
    "simple_integration": "algebra",
    "sokoban": "games",
    "spell_backward": "algorithmic",
    "spiral_matrix": "algorithmic",
    "string_insertion": "algorithmic",
    "string_manipulation": "algorithmic",
    "string_splitting": "algorithmic",
    "string_synthesis": "algorithmic",
    "sudoku": "games",
    "survo": "games",
    "syllogism": "logic",
    "time_intervals": "arithmetic",
    "tower_of_hanoi": "games",
    "tsumego": "games",
    "word_ladder": "algorithmic",
    "word_sequence_reversal": "algorithmic",
    "word_sorting": "algorithmic",
    "zebra_puzzles": "logic",
    # END GENERATED
}


def installed_names() -> dict[str, str]:
    """Name -> category of every dataset in the installed reasoning-gym (imports it)."""
    from reasoning_gym.factory import DATASETS as registry

    return {name: cls.__module__.split(".")[1] for name, (cls, _config) in sorted(registry.items())}


def regenerate(path: Path = Path(__file__)) -> None:
    """Rewrite the table in this file from the installed reasoning-gym."""
    from importlib.metadata import version

    text = path.read_text()
    head, rest = text.split("# BEGIN GENERATED\n", 1)
    _, tail = rest.split("# END GENERATED\n", 1)
    rows = "".join(f'    "{name}": "{cat}",\n' for name, cat in installed_names().items())
    new = f'GENERATED_FROM = "{version("reasoning-gym")}"'
    head = head.replace(f'GENERATED_FROM = "{GENERATED_FROM}"', new)
    path.write_text(f"{head}# BEGIN GENERATED\n{rows}    # END GENERATED\n{tail}")


if __name__ == "__main__":
    regenerate()
