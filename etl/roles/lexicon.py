"""Cooking lexicons for the rule-based role extractor (etl/roles/extract.py).

General English cooking vocabulary, not the sample kitchen's: actions (verb lemmas and their
inflected forms), tools (instruments), habitats (vessels, appliances and places food is in), and the
commonsense default tool and habitat of an action, used to propose *hidden* roles (implied, with no
span in the text) the way R2VQ's annotation does ("cut the apples into wedges" -> by using a knife).
"""
from __future__ import annotations

ACTIONS = (
    "add", "arrange", "assemble", "bake", "baste", "beat", "blanch", "blend", "boil", "braise", "break",
    "bring", "broil", "brown", "brush", "caramelize", "char", "chill", "chop", "churn", "coat", "combine",
    "cook", "cool", "core", "cover", "crack", "cream", "crumble", "crush", "cube", "cut", "debone",
    "decorate", "deglaze", "dice", "dip", "dissolve", "divide", "dollop", "drain", "drizzle", "dust", "fill",
    "flatten", "flip", "fold", "freeze", "fry", "garnish", "glaze", "grate", "grease", "grill", "grind",
    "halve", "heat", "infuse", "julienne", "knead", "layer", "line", "marinate", "mash", "measure", "melt",
    "microwave", "mince", "mix", "peel", "pipe", "pit", "place", "poach", "pound", "pour", "preheat",
    "press", "puree", "put", "quarter", "reduce", "refrigerate", "reheat", "remove", "rinse", "roast",
    "roll", "rub", "saute", "scoop", "scramble", "sear", "season", "serve", "shake", "shape", "shred",
    "sift", "simmer", "skewer", "slice", "smash", "soak", "spoon", "spray", "spread", "sprinkle", "squeeze",
    "steam", "stew", "stir", "strain", "stuff", "tear", "thaw", "toast", "top", "toss", "transfer", "trim",
    "turn", "wash", "whip", "whisk", "wrap", "zest", "grill", "sauté",
)

IRREGULAR = {  # lemma -> extra inflected forms
    "beat": ("beaten",), "break": ("broke", "broken"), "bring": ("brought",), "cut": (), "put": (),
    "freeze": ("froze", "frozen"), "grind": ("ground",), "shake": ("shook", "shaken"), "spread": (),
    "tear": ("tore", "torn"), "fry": ("fried", "fries"), "dry": ("dried",), "sauté": ("sautéed", "sautéing"),
}

_DOUBLE = {"chop", "stir", "whip", "dip", "drop", "grab", "pat", "pit", "scrub", "slip", "strip", "trim",
           "wrap", "zip", "flip", "sip", "top", "plan", "rub", "char", "cut", "put", "set"}


def inflections(lemma: str) -> set[str]:
    """The forms of a verb lemma: base, -s, -ed, -ing (regular spelling rules plus IRREGULAR)."""
    forms = {lemma}
    if lemma.endswith(("s", "sh", "ch", "x", "z")):
        forms.add(lemma + "es")
    elif lemma.endswith("y") and lemma[-2:-1] not in "aeiou":
        forms.add(lemma[:-1] + "ies")
    else:
        forms.add(lemma + "s")
    if lemma in ("cut", "put", "set", "spread", "beat"):
        pass
    elif lemma in _DOUBLE:
        forms |= {lemma + lemma[-1] + "ed", lemma + lemma[-1] + "ing"}
    elif lemma.endswith("e"):
        forms |= {lemma + "d", lemma[:-1] + "ing"}
    elif lemma.endswith("y") and lemma[-2:-1] not in "aeiou":
        forms |= {lemma[:-1] + "ied", lemma + "ing"}
    else:
        forms |= {lemma + "ed", lemma + "ing"}
    if lemma in ("cut", "put", "set", "spread", "beat"):
        forms.add(lemma + ("ting" if lemma in ("cut", "put", "set") else "ing"))
    forms |= set(IRREGULAR.get(lemma, ()))
    return forms


VERB_FORMS: dict[str, str] = {f: lemma for lemma in ACTIONS for f in sorted(inflections(lemma))}

# Instruments. Longest phrase wins ("paring knife" over "knife").
TOOLS = (
    "knife", "chef's knife", "paring knife", "butter knife", "bread knife", "sharp knife", "serrated knife",
    "whisk", "wire whisk", "balloon whisk", "spoon", "wooden spoon", "slotted spoon", "metal spoon",
    "spatula", "rubber spatula", "silicone spatula", "offset spatula", "ladle", "tongs", "fork", "peeler",
    "vegetable peeler", "grater", "box grater", "cheese grater", "microplane", "zester", "rolling pin",
    "mixer", "hand mixer", "stand mixer", "electric mixer", "immersion blender", "hand blender",
    "stick blender", "oven mitt", "oven mitts", "scissors", "kitchen scissors", "kitchen shears", "shears",
    "skewer", "toothpick", "piping bag", "pastry bag", "pastry brush", "brush", "cookie cutter",
    "biscuit cutter", "pizza cutter", "ice cream scoop", "cookie scoop", "scoop", "measuring cup",
    "measuring spoon", "sieve", "strainer", "colander", "thermometer", "candy thermometer",
    "meat thermometer", "mortar and pestle", "pestle", "masher", "potato masher", "juicer", "can opener",
    "mandoline", "funnel", "melon baller", "pastry cutter", "pastry blender", "dough hook", "paddle",
    "cheesecloth", "knife and fork", "straw", "chopsticks", "tweezers", "apple corer", "garlic press",
    "meat mallet", "mallet", "blowtorch", "torch", "baster", "egg slicer", "salad spinner",
)

HABITATS = (
    "bowl", "mixing bowl", "large bowl", "small bowl", "medium bowl", "glass bowl", "metal bowl",
    "serving bowl", "soup bowl", "pan", "frying pan", "skillet", "saucepan", "sauce pan", "pot",
    "stock pot", "stockpot", "dutch oven", "wok", "baking sheet", "cookie sheet", "sheet pan",
    "baking tray", "tray", "baking dish", "casserole dish", "casserole", "dish", "pie dish", "pie plate",
    "pie pan", "pie tin", "cake pan", "cake tin", "loaf pan", "loaf tin", "muffin tin", "muffin pan",
    "cupcake pan", "springform pan", "bundt pan", "roasting pan", "grill pan", "griddle", "ramekin",
    "plate", "serving plate", "platter", "glass", "cup", "mug", "jar", "mason jar", "container",
    "bag", "zip bag", "ziploc bag", "zip-lock bag", "plastic bag", "freezer bag", "oven", "fridge",
    "refrigerator", "freezer", "microwave", "grill", "barbecue", "cutting board", "chopping board",
    "board", "counter", "countertop", "work surface", "surface", "blender", "food processor",
    "slow cooker", "crock pot", "crockpot", "pressure cooker", "instant pot", "rice cooker", "rack",
    "wire rack", "cooling rack", "mold", "mould", "molds", "bottle", "pitcher", "jug", "ice cube tray",
    "steamer", "toaster", "toaster oven", "air fryer", "deep fryer", "fryer", "waffle iron", "tin",
    "stove", "stovetop", "burner", "cooler", "thermos", "teapot", "kettle", "carafe", "punch bowl",
    "parchment paper", "baking paper", "foil", "aluminum foil", "plastic wrap", "cling film",
)

# commonsense instrument / place of an action when the text leaves it out
DEFAULT_TOOL = {
    "chop": "knife", "dice": "knife", "mince": "knife", "slice": "knife", "cut": "knife", "cube": "knife",
    "halve": "knife", "quarter": "knife", "trim": "knife", "julienne": "knife", "core": "knife",
    "peel": "peeler", "grate": "grater", "zest": "zester", "whisk": "whisk", "beat": "mixer",
    "cream": "mixer", "whip": "whisk", "mix": "spoon", "stir": "spoon", "combine": "spoon", "fold": "spatula",
    "spread": "knife", "flip": "spatula", "turn": "spatula", "roll": "rolling pin", "mash": "masher",
    "crush": "rolling pin", "scoop": "spoon", "ladle": "ladle", "brush": "brush", "pipe": "piping bag",
    "strain": "strainer", "drain": "colander", "sift": "sieve", "grill": "tongs", "skewer": "skewer",
    "knead": "hands", "press": "hands", "shape": "hands", "bake": "oven mitt", "roast": "oven mitt",
}
DEFAULT_HABITAT = {
    "bake": "oven", "roast": "oven", "broil": "oven", "preheat": "oven", "boil": "pot", "simmer": "pot",
    "poach": "pot", "blanch": "pot", "stew": "pot", "braise": "pot", "fry": "pan", "saute": "pan",
    "sauté": "pan", "sear": "pan", "toast": "pan", "brown": "pan", "melt": "saucepan", "chill": "fridge",
    "refrigerate": "fridge", "freeze": "freezer", "microwave": "microwave", "grill": "grill",
    "steam": "steamer", "blend": "blender", "puree": "blender", "mix": "bowl", "whisk": "bowl",
    "combine": "bowl", "beat": "bowl", "cream": "bowl", "stir": "bowl", "toss": "bowl", "marinate": "bowl",
    "chop": "cutting board", "dice": "cutting board", "mince": "cutting board", "slice": "cutting board",
    "cut": "cutting board", "knead": "counter", "roll": "counter", "serve": "plate", "garnish": "plate",
    "peel": "cutting board", "grate": "bowl", "fold": "bowl", "spread": "plate", "sprinkle": "plate",
    "layer": "dish", "pour": "dish",
}

# words that open an instruction before its verb ("Gently fold ...", "Then add ...")
ADVERBS = {
    "then", "now", "next", "gently", "finely", "roughly", "coarsely", "carefully", "slowly", "quickly",
    "lightly", "thinly", "thoroughly", "evenly", "generously", "firstly", "first", "finally", "also",
    "just", "simply", "immediately", "continue", "again", "together", "well", "and", "or", "please",
    "to", "you", "we", "i", "should", "can", "will", "must", "then,", "afterwards", "meanwhile", "once",
    "slightly", "constantly", "occasionally", "briefly", "vigorously", "lastly", "second", "third",
}

SUBJECTS = {"i", "we", "you"}

UNITS = {
    "cup", "cups", "tbsp", "tsp", "tablespoon", "tablespoons", "teaspoon", "teaspoons", "g", "grams", "kg",
    "ml", "l", "liter", "litre", "liters", "oz", "ounce", "ounces", "lb", "lbs", "pound", "pounds", "inch",
    "inches", "cm", "mm", "pinch", "dash", "slice", "slices", "piece", "pieces", "clove", "cloves", "can",
    "cans", "stick", "sticks", "minutes", "minute", "hours", "hour", "seconds", "second", "degrees", "layer",
    "bunch", "handful", "drops", "drop", "sprig", "sprigs", "package", "packet", "bottle",
}
