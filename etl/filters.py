"""Recipe-level filters (datatrove style): each returns (keep, reason) with a reason from the reject
vocabulary of stage `clean`: non_food, non_english, too_few_steps, too_many_steps, video_only.

They see a `RecipeView` of the CLEANED text; thresholds are dataclass fields.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")

FOOD_WORDS = frozenset("""
bake baked baking oven preheat cook cooked cooking stir stirring mix mixed mixing whisk beat fold
knead dough batter flour sugar salt pepper butter oil olive egg eggs milk cream cheese water sauce
boil boiling simmer fry fried frying saute roast roasted grill grilled toast chop chopped dice diced
mince minced slice sliced grate grated peel peeled cup cups tbsp tsp tablespoon tablespoons teaspoon
teaspoons ounce ounces oz gram grams pinch bowl pan saucepan pot skillet tray dish plate serve served
serving taste tasty delicious recipe ingredients ingredient chocolate vanilla cake cookies cookie
bread cinnamon garlic onion onions tomato tomatoes chicken beef pork bacon sausage fish shrimp rice
pasta noodles soup stew salad fruit lemon lime orange apple banana berries strawberries honey syrup
yeast spoon whisked blend blender fridge refrigerate freeze frozen chill chilled juice sweet savory
savoury spicy flavor flavour vegetables vegetable potato potatoes carrot carrots cheese mozzarella
pizza pie crust frosting icing sprinkle garnish marinade marinate meat eat enjoy breakfast dinner
lunch dessert snack drink cocktail coffee tea candy fudge jam pickles muffin muffins cupcakes
""".split())
NONFOOD_WORDS = frozenset("""
jigsaw sand sanding sandpaper grit drill drilled drilling solder soldering resistor resistors ohm
led leds arduino raspberry pi circuit breadboard wire wires wiring voltage battery batteries volt
volts glue clamp clamps plywood plank lumber wood wooden screw screws bolt bolts hinge hinges epoxy
resin acrylic aluminium aluminum pallet varnish stain polyurethane router cnc endmill mill milling
spreadsheet excel software firmware code sketch upload microcontroller sensor servo motor pcb
filament printer printed laser vinyl sewing fabric stitch stitches yarn knit crochet paint painted
brush canvas pencil chisel saw sawing lathe welding weld clay kiln
""".split())
LANGUAGES = ("en", "es", "de", "fr", "it", "pt", "nl")


@dataclass
class StepView:
    step_idx: int
    title: str
    body: str
    n_videos: int = 0
    n_images: int = 0


@dataclass
class RecipeView:
    recipe_id: str
    title: str | None
    category: str | None
    steps: list[StepView] = field(default_factory=list)

    def words(self) -> list[str]:
        text = " ".join([self.title or ""] + [f"{s.title} {s.body}" for s in self.steps])
        return [w.lower() for w in _WORD.findall(text)]


@dataclass
class StepCountFilter:
    min_steps: int = 3
    max_steps: int = 25

    def __call__(self, r: RecipeView) -> tuple[bool, str | None]:
        n = len(r.steps)
        if n < self.min_steps:
            return False, "too_few_steps"
        if n > self.max_steps:
            return False, "too_many_steps"
        return True, None


@dataclass
class VideoOnlyFilter:
    """A recipe with videos and not a single image is a video recipe: nothing to build questions from."""

    def __call__(self, r: RecipeView) -> tuple[bool, str | None]:
        if any(s.n_videos for s in r.steps) and not any(s.n_images for s in r.steps):
            return False, "video_only"
        return True, None


@lru_cache(maxsize=1)
def _language_freqs() -> dict[str, dict[str, float]]:
    import wordfreq
    return {lang: wordfreq.get_frequency_dict(lang, wordlist="small" if lang != "en" else "large")
            for lang in LANGUAGES}


@dataclass
class EnglishFilter:
    """Share of words whose most frequent language (wordfreq, 7 languages) is English."""
    min_english_share: float = 0.5
    min_words: int = 8

    def english_share(self, words: list[str]) -> float:
        freqs = _language_freqs()
        en = freqs["en"]
        scored = n_en = 0
        for w in words:
            if len(w) < 2:
                continue
            best_lang, best = "en", en.get(w, 0.0)
            for lang in LANGUAGES[1:]:
                f = freqs[lang].get(w, 0.0)
                if f > best * 1.5:          # clearly more frequent elsewhere
                    best_lang, best = lang, f
            if best == 0.0:
                continue
            scored += 1
            n_en += best_lang == "en"
        return n_en / scored if scored else 1.0

    def __call__(self, r: RecipeView) -> tuple[bool, str | None]:
        words = r.words()
        if len(words) >= self.min_words and self.english_share(words) < self.min_english_share:
            return False, "non_english"
        return True, None


@dataclass
class FoodFilter:
    """Food category and cooking vocabulary: non-food projects use workshop/electronics words."""
    food_categories: tuple[str, ...] = ("cooking", "food")
    min_nonfood_hits: int = 3

    def __call__(self, r: RecipeView) -> tuple[bool, str | None]:
        if r.category and r.category.lower() not in self.food_categories:
            return False, "non_food"
        words = r.words()
        food = sum(w in FOOD_WORDS for w in words)
        nonfood = sum(w in NONFOOD_WORDS for w in words)
        if nonfood >= self.min_nonfood_hits and nonfood > food:
            return False, "non_food"
        if food == 0 and len(words) >= 30:
            return False, "non_food"
        return True, None


DEFAULT_FILTERS = (StepCountFilter(), VideoOnlyFilter(), EnglishFilter(), FoodFilter())


def filter_recipe(r: RecipeView, filters=DEFAULT_FILTERS) -> tuple[bool, str | None]:
    """First failing filter's reason, or (True, None)."""
    for f in filters:
        keep, reason = f(r)
        if not keep:
            return False, reason
    return True, None
