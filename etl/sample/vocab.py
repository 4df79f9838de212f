"""The sample kitchen's vocabulary: ingredients (colour, shape, how each state looks), actions that
change state, vessels, tools, the 24 food channels, and the non-food / non-English material.

Pure data. Colours are RGB tuples; renderers and text generators read these tables and nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ingredient:
    name: str                      # as written in text ("onion")
    plural: str                    # list form ("onions")
    colour: tuple[int, int, int]   # outside, whole
    inner: tuple[int, int, int]    # cut surface (chopped, sliced, grated)
    shape: str                     # round | oval | long | leafy | block | flat | cluster | small | grain | powder | liquid | paste
    taste: str                     # sweet | savoury | both
    unit: str                      # count | cup | tbsp | tsp | g | oz | ml | pinch | slice
    rare: bool = False             # a real word a naive segmenter may break ("maraschinos", "gnocchi")


def _i(name, plural, colour, inner, shape, taste, unit, rare=False) -> Ingredient:
    return Ingredient(name, plural, colour, inner, shape, taste, unit, rare)


INGREDIENTS: list[Ingredient] = [
    _i("flour", "flour", (244, 241, 232), (244, 241, 232), "powder", "both", "cup"),
    _i("sugar", "sugar", (250, 250, 248), (250, 250, 248), "powder", "sweet", "cup"),
    _i("brown sugar", "brown sugar", (160, 105, 55), (160, 105, 55), "powder", "sweet", "cup"),
    _i("salt", "salt", (238, 238, 240), (238, 238, 240), "powder", "savoury", "tsp"),
    _i("butter", "butter", (250, 228, 140), (252, 235, 160), "block", "both", "tbsp"),
    _i("egg", "eggs", (236, 214, 180), (250, 196, 40), "oval", "both", "count"),
    _i("milk", "milk", (250, 250, 244), (250, 250, 244), "liquid", "both", "cup"),
    _i("heavy cream", "heavy cream", (252, 248, 232), (252, 248, 232), "liquid", "sweet", "cup"),
    _i("water", "water", (196, 222, 240), (196, 222, 240), "liquid", "both", "cup"),
    _i("olive oil", "olive oil", (196, 176, 48), (196, 176, 48), "liquid", "savoury", "tbsp"),
    _i("vanilla extract", "vanilla extract", (92, 54, 24), (92, 54, 24), "liquid", "sweet", "tsp"),
    _i("baking powder", "baking powder", (240, 240, 236), (240, 240, 236), "powder", "sweet", "tsp"),
    _i("cocoa powder", "cocoa powder", (92, 56, 36), (92, 56, 36), "powder", "sweet", "tbsp"),
    _i("dark chocolate", "dark chocolate", (74, 42, 24), (90, 52, 30), "block", "sweet", "g"),
    _i("honey", "honey", (222, 160, 30), (222, 160, 30), "liquid", "sweet", "tbsp"),
    _i("maple syrup", "maple syrup", (170, 90, 20), (170, 90, 20), "liquid", "sweet", "tbsp"),
    _i("lemon", "lemons", (250, 226, 50), (250, 244, 170), "oval", "both", "count"),
    _i("lime", "limes", (120, 190, 50), (200, 230, 150), "oval", "both", "count"),
    _i("orange", "oranges", (250, 150, 20), (252, 180, 80), "round", "sweet", "count"),
    _i("apple", "apples", (200, 30, 40), (250, 240, 200), "round", "sweet", "count"),
    _i("banana", "bananas", (250, 220, 60), (250, 242, 206), "long", "sweet", "count"),
    _i("strawberry", "strawberries", (220, 30, 50), (250, 140, 150), "small", "sweet", "cup"),
    _i("blueberry", "blueberries", (50, 60, 140), (110, 60, 120), "small", "sweet", "cup"),
    _i("maraschino cherry", "maraschinos", (200, 10, 40), (220, 40, 70), "small", "sweet", "count", True),
    _i("onion", "onions", (210, 170, 110), (246, 240, 226), "round", "savoury", "count"),
    _i("red onion", "red onions", (130, 40, 90), (220, 180, 210), "round", "savoury", "count"),
    _i("garlic", "garlic cloves", (244, 240, 226), (250, 246, 230), "cluster", "savoury", "count"),
    _i("tomato", "tomatoes", (226, 40, 30), (240, 80, 60), "round", "savoury", "count"),
    _i("potato", "potatoes", (170, 120, 70), (248, 232, 170), "oval", "savoury", "count"),
    _i("carrot", "carrots", (240, 120, 20), (250, 150, 50), "long", "both", "count"),
    _i("celery", "celery stalks", (150, 200, 90), (190, 226, 140), "long", "savoury", "count"),
    _i("bell pepper", "bell peppers", (220, 30, 20), (236, 80, 60), "round", "savoury", "count"),
    _i("zucchini", "zucchini", (40, 100, 40), (220, 236, 180), "long", "savoury", "count"),
    _i("mushroom", "mushrooms", (150, 110, 80), (236, 220, 196), "round", "savoury", "cup"),
    _i("spinach", "spinach", (40, 110, 40), (50, 130, 50), "leafy", "savoury", "cup"),
    _i("lettuce", "lettuce", (150, 210, 100), (190, 230, 150), "leafy", "savoury", "count"),
    _i("cucumber", "cucumbers", (50, 120, 50), (210, 240, 190), "long", "savoury", "count"),
    _i("avocado", "avocados", (50, 70, 30), (200, 220, 110), "oval", "savoury", "count"),
    _i("broccoli", "broccoli", (50, 130, 50), (110, 170, 80), "cluster", "savoury", "cup"),
    _i("sweet corn", "sweet corn", (250, 210, 60), (252, 226, 100), "long", "both", "cup"),
    _i("ginger", "ginger", (210, 170, 110), (246, 226, 150), "cluster", "both", "tsp"),
    _i("chili pepper", "chili peppers", (210, 20, 20), (230, 70, 50), "long", "savoury", "count"),
    _i("basil", "basil", (50, 140, 50), (60, 150, 60), "leafy", "savoury", "cup"),
    _i("parsley", "parsley", (60, 150, 40), (70, 160, 50), "leafy", "savoury", "cup"),
    _i("chicken breast", "chicken breasts", (240, 190, 180), (250, 236, 220), "flat", "savoury", "count"),
    _i("beef", "beef", (160, 40, 40), (190, 70, 70), "block", "savoury", "g"),
    _i("bacon", "bacon strips", (220, 110, 100), (240, 200, 190), "flat", "savoury", "slice"),
    _i("sausage", "sausages", (190, 120, 100), (210, 150, 130), "long", "savoury", "count"),
    _i("shrimp", "shrimp", (240, 170, 150), (250, 200, 180), "small", "savoury", "g"),
    _i("salmon", "salmon", (250, 130, 90), (252, 160, 120), "flat", "savoury", "g"),
    _i("cheddar", "cheddar", (250, 170, 40), (252, 190, 70), "block", "savoury", "cup"),
    _i("mozzarella", "mozzarella", (250, 250, 240), (252, 252, 246), "round", "savoury", "g"),
    _i("parmesan", "parmesan", (240, 226, 160), (246, 236, 180), "block", "savoury", "cup"),
    _i("cream cheese", "cream cheese", (252, 250, 240), (252, 250, 240), "paste", "sweet", "g"),
    _i("mascarpone", "mascarpone", (252, 246, 226), (252, 246, 226), "paste", "sweet", "g", True),
    _i("yogurt", "yogurt", (250, 250, 250), (250, 250, 250), "paste", "both", "cup"),
    _i("rice", "rice", (248, 246, 240), (248, 246, 240), "grain", "savoury", "cup"),
    _i("spaghetti", "spaghetti", (240, 214, 140), (240, 214, 140), "long", "savoury", "g"),
    _i("gnocchi", "gnocchi", (240, 220, 160), (244, 228, 180), "small", "savoury", "g", True),
    _i("bread", "bread slices", (200, 140, 70), (246, 230, 190), "block", "both", "slice"),
    _i("tortilla", "tortillas", (240, 220, 170), (244, 228, 186), "flat", "savoury", "count"),
    _i("oats", "oats", (220, 196, 150), (220, 196, 150), "grain", "sweet", "cup"),
    _i("walnut", "walnuts", (150, 100, 50), (200, 160, 100), "small", "sweet", "cup"),
    _i("almond", "almonds", (180, 120, 70), (240, 220, 180), "small", "sweet", "cup"),
    _i("peanut butter", "peanut butter", (190, 130, 60), (190, 130, 60), "paste", "sweet", "tbsp"),
    _i("Nutella", "Nutella", (90, 50, 30), (90, 50, 30), "paste", "sweet", "tbsp", True),
    _i("tzatziki", "tzatziki", (236, 244, 226), (236, 244, 226), "paste", "savoury", "cup", True),
    _i("Sriracha", "Sriracha", (220, 40, 20), (220, 40, 20), "liquid", "savoury", "tsp", True),
    _i("soy sauce", "soy sauce", (60, 30, 16), (60, 30, 16), "liquid", "savoury", "tbsp"),
    _i("Worcestershire sauce", "Worcestershire sauce", (80, 40, 20), (80, 40, 20), "liquid", "savoury", "tsp", True),
    _i("panko", "panko", (236, 200, 120), (236, 200, 120), "grain", "savoury", "cup", True),
    _i("gochujang", "gochujang", (180, 30, 20), (180, 30, 20), "paste", "savoury", "tbsp", True),
    _i("cinnamon", "cinnamon", (160, 90, 40), (160, 90, 40), "powder", "sweet", "tsp"),
    _i("pumpkin puree", "pumpkin puree", (230, 130, 30), (230, 130, 30), "paste", "sweet", "cup"),
    _i("marshmallow", "marshmallows", (252, 250, 250), (252, 246, 246), "small", "sweet", "cup"),
    _i("coconut milk", "coconut milk", (246, 244, 236), (246, 244, 236), "liquid", "both", "cup"),
    _i("Bärenjäger", "Bärenjäger", (200, 140, 30), (200, 140, 30), "liquid", "sweet", "ml", True),
    _i("quinoa", "quinoa", (230, 210, 170), (230, 210, 170), "grain", "savoury", "cup", True),
]
ING = {i.name: i for i in INGREDIENTS}


@dataclass(frozen=True)
class Action:
    verb: str                      # "chop"
    state: str                     # resulting state ("chopped")
    vessels: tuple[str, ...]       # first one is the usual one
    tools: tuple[str, ...]
    applies_to: tuple[str, ...]    # ingredient shapes it applies to; ("*",) = any, ("mixture",) = a mixture
    titles: tuple[str, ...]        # step title templates
    sentences: tuple[str, ...]     # body templates: {ings} {vessel} {tool} {time} {temp} {qty}
    heat: bool = False


SOLID = ("round", "oval", "long", "leafy", "block", "flat", "cluster", "small")

ACTIONS: dict[str, Action] = {a.verb: a for a in [
    Action("gather", "whole", ("counter",), ("none",), ("*",),
           ("Ingredients", "What You'll Need", "Gather Your Ingredients", "Ingredients and Tools"),
           ("Here is everything you need.", "Gather all of the ingredients before you start.")),
    Action("chop", "chopped", ("cutting board",), ("chef's knife",), SOLID,
           ("Chop the {ing}", "Chopping", "Prep the {ing}"),
           ("Chop {qty} {ings} into small pieces with a {tool}.",
            "Using a sharp {tool}, roughly chop the {ings} on the {vessel}.")),
    Action("dice", "diced", ("cutting board",), ("chef's knife",), SOLID,
           ("Dice the {ing}", "Dicing"),
           ("Dice the {ings} into 1/2 inch cubes.", "Cut {qty} {ings} into small dice with a {tool}.")),
    Action("mince", "minced", ("cutting board",), ("chef's knife",), ("cluster", "leafy", "round", "long"),
           ("Mince the {ing}", "Mincing"),
           ("Finely mince the {ings}.", "Mince {qty} {ings} as fine as you can with a {tool}.")),
    Action("slice", "sliced", ("cutting board",), ("chef's knife", "paring knife"), SOLID,
           ("Slice the {ing}", "Slicing"),
           ("Slice the {ings} about 1/4 inch thick.", "Cut {qty} {ings} into thin slices on the {vessel}.")),
    Action("grate", "grated", ("mixing bowl",), ("box grater",), ("block", "long", "round", "cluster"),
           ("Grate the {ing}", "Grating"),
           ("Grate {qty} {ings} into the {vessel} with a {tool}.", "Use the fine side of the {tool} to grate the {ings}.")),
    Action("peel", "peeled", ("cutting board",), ("vegetable peeler",), ("round", "oval", "long", "cluster"),
           ("Peel the {ing}", "Peeling"),
           ("Peel the {ings} with a {tool}.", "Remove the skin of the {ings} and discard it.")),
    Action("crush", "crushed", ("zip bag",), ("rolling pin",), ("small", "grain", "cluster", "block"),
           ("Crush the {ing}", "Crushing"),
           ("Put the {ings} in a {vessel} and crush them with a {tool}.", "Crush {qty} {ings} into coarse crumbs.")),
    Action("mix", "mixed", ("mixing bowl",), ("wooden spoon",), ("*",),
           ("Mix Everything", "Combine the {ing}", "Mixing"),
           ("In a large {vessel}, mix the {ings} until combined.", "Add the {ings} and mix with a {tool} for {time} minutes.")),
    Action("whisk", "whisked", ("mixing bowl",), ("whisk",), ("*",),
           ("Whisk the {ing}", "Whisk", "Wet Ingredients"),
           ("Whisk the {ings} together in a {vessel} until smooth.", "Whisk {qty} {ings} for {time} minutes until frothy.")),
    Action("beat", "beaten", ("mixing bowl",), ("hand mixer",), ("*",),
           ("Beat the {ing}", "Cream the {ing}"),
           ("Beat the {ings} with a {tool} on medium speed for {time} minutes.", "Cream the {ings} until light and fluffy.")),
    Action("blend", "blended", ("blender",), ("none",), ("*",),
           ("Blend It", "Blend the {ing}"),
           ("Put the {ings} in a {vessel} and blend for {time} seconds until smooth.", "Blend everything on high until completely smooth.")),
    Action("knead", "kneaded", ("cutting board",), ("hands",), ("mixture",),
           ("Knead the Dough", "Kneading"),
           ("Turn the dough out onto a floured surface and knead for {time} minutes.", "Knead until the dough is smooth and elastic.")),
    Action("fold", "folded", ("mixing bowl",), ("rubber spatula",), ("mixture",),
           ("Fold in the {ing}", "Folding"),
           ("Gently fold the {ings} into the batter with a {tool}.", "Fold until no streaks remain.")),
    Action("melt", "melted", ("saucepan",), ("rubber spatula",), ("block", "paste", "small"),
           ("Melt the {ing}", "Melting"),
           ("Melt the {ings} in a {vessel} over low heat.", "Heat the {ings} for {time} minutes, stirring, until melted.")),
    Action("boil", "boiled", ("stock pot",), ("ladle",), ("*",),
           ("Boil the {ing}", "Bring to a Boil"),
           ("Bring a large pot of water to a boil and add the {ings}.", "Boil the {ings} for {time} minutes.")),
    Action("simmer", "simmered", ("stock pot",), ("ladle",), ("mixture",),
           ("Simmer", "Let It Simmer"),
           ("Reduce the heat and simmer for {time} minutes.", "Let the {ings} simmer gently, stirring now and then."), True),
    Action("fry", "fried", ("frying pan",), ("spatula",), SOLID + ("mixture",),
           ("Fry the {ing}", "Frying"),
           ("Heat oil in a {vessel} and fry the {ings} for {time} minutes per side.", "Fry the {ings} until golden brown."), True),
    Action("saute", "sauteed", ("frying pan",), ("wooden spoon",), SOLID,
           ("Saute the {ing}", "Sauteing"),
           ("Saute the {ings} in a {vessel} over medium heat for {time} minutes.", "Cook the {ings} until soft and fragrant."), True),
    Action("bake", "baked", ("baking dish", "baking tray", "muffin tin", "pie dish", "cake pan"), ("oven mitt",), ("*",),
           ("Bake", "Into the Oven", "Bake the {ing}"),
           ("Bake at {temp} degrees F for {time} minutes.", "Preheat the oven to {temp} degrees F and bake until golden brown."), True),
    Action("roast", "roasted", ("baking tray",), ("oven mitt",), SOLID,
           ("Roast the {ing}", "Roasting"),
           ("Roast the {ings} at {temp} degrees F for {time} minutes.", "Spread the {ings} on a {vessel} and roast until browned."), True),
    Action("grill", "grilled", ("grill pan",), ("tongs",), SOLID,
           ("Grill the {ing}", "Grilling"),
           ("Grill the {ings} for {time} minutes on each side.", "Turn the {ings} with {tool} until charred."), True),
    Action("toast", "toasted", ("frying pan",), ("spatula",), ("small", "grain", "block", "flat"),
           ("Toast the {ing}", "Toasting"),
           ("Toast the {ings} in a dry {vessel} for {time} minutes.", "Toast until fragrant and lightly browned."), True),
    Action("pour", "poured", ("glass", "cake pan", "baking dish", "jar"), ("none",), ("liquid", "mixture"),
           ("Pour It In", "Pour the {ing}"),
           ("Pour the {ings} into the {vessel}.", "Carefully pour the mixture into the prepared {vessel}.")),
    Action("spread", "spread", ("plate", "baking tray"), ("butter knife",), ("paste", "mixture", "block"),
           ("Spread the {ing}", "Spreading"),
           ("Spread the {ings} evenly with a {tool}.", "Spread a thin layer of the {ings} over the top.")),
    Action("roll", "rolled", ("cutting board",), ("rolling pin",), ("mixture",),
           ("Roll Out the Dough", "Rolling"),
           ("Roll the dough out to 1/4 inch thick with a {tool}.", "Roll out the {ings} into a large circle.")),
    Action("sprinkle", "sprinkled", ("plate", "baking tray"), ("none",), ("*",),
           ("Sprinkle the {ing}", "Toppings"),
           ("Sprinkle the {ings} over the top.", "Finish with a sprinkle of {ings}.")),
    Action("layer", "layered", ("baking dish",), ("spoon",), ("*",),
           ("Layer It Up", "Assemble"),
           ("Layer the {ings} in the {vessel}.", "Make a layer of {ings}, then repeat.")),
    Action("chill", "chilled", ("mixing bowl", "jar", "glass"), ("none",), ("*",),
           ("Chill", "Refrigerate"),
           ("Cover and chill for {time} minutes.", "Refrigerate the {ings} for at least {time} minutes.")),
    Action("freeze", "frozen", ("jar", "baking tray"), ("none",), ("*",),
           ("Freeze", "Into the Freezer"),
           ("Freeze the {ings} for {time} minutes until firm.", "Put the {vessel} in the freezer overnight.")),
    Action("marinate", "marinated", ("mixing bowl",), ("tongs",), SOLID,
           ("Marinate the {ing}", "Marinade"),
           ("Marinate the {ings} for {time} minutes.", "Coat the {ings} in the marinade and let rest.")),
    Action("garnish", "garnished", ("plate",), ("none",), ("*",),
           ("Garnish", "Finishing Touches"),
           ("Garnish with the {ings}.", "Top with {ings} just before serving.")),
    Action("serve", "served", ("plate", "soup bowl", "glass"), ("none",), ("*",),
           ("Serve", "Enjoy!", "Serve and Enjoy"),
           ("Serve warm and enjoy!", "Plate it up and serve right away.")),
]}
CUT_ACTIONS = ("chop", "dice", "mince", "slice", "grate", "peel")
COMBINE_ACTIONS = ("mix", "whisk", "beat", "blend")


@dataclass(frozen=True)
class Vessel:
    name: str
    kind: str                      # bowl | plate | pot | pan | dish | tray | board | glass | jar | tin | blender | bag | counter
    colour: tuple[int, int, int]
    rim: tuple[int, int, int]


VESSELS: dict[str, Vessel] = {v.name: v for v in [
    Vessel("counter", "counter", (0, 0, 0), (0, 0, 0)),
    Vessel("cutting board", "board", (196, 150, 96), (150, 105, 60)),
    Vessel("mixing bowl", "bowl", (236, 236, 240), (190, 190, 200)),
    Vessel("soup bowl", "bowl", (60, 90, 150), (40, 60, 110)),
    Vessel("plate", "plate", (250, 250, 250), (210, 210, 215)),
    Vessel("saucepan", "pot", (170, 170, 176), (110, 110, 118)),
    Vessel("stock pot", "pot", (120, 124, 132), (70, 72, 80)),
    Vessel("frying pan", "pan", (46, 46, 50), (24, 24, 26)),
    Vessel("grill pan", "pan", (36, 36, 40), (20, 20, 22)),
    Vessel("baking dish", "dish", (232, 236, 244), (160, 170, 190)),
    Vessel("baking tray", "tray", (186, 186, 192), (130, 130, 140)),
    Vessel("muffin tin", "tin", (150, 150, 158), (100, 100, 108)),
    Vessel("pie dish", "plate", (200, 110, 60), (160, 80, 40)),
    Vessel("cake pan", "pot", (160, 160, 168), (120, 120, 128)),
    Vessel("glass", "glass", (220, 236, 244), (170, 190, 205)),
    Vessel("jar", "jar", (214, 230, 226), (140, 150, 150)),
    Vessel("blender", "blender", (210, 226, 236), (60, 60, 64)),
    Vessel("zip bag", "bag", (232, 240, 246), (170, 180, 200)),
]}

TOOLS: dict[str, tuple[int, int, int]] = {
    "none": (0, 0, 0), "chef's knife": (200, 204, 210), "paring knife": (200, 204, 210),
    "butter knife": (210, 210, 214), "box grater": (180, 184, 190), "vegetable peeler": (90, 160, 90),
    "rolling pin": (214, 176, 120), "wooden spoon": (196, 150, 96), "whisk": (200, 200, 206),
    "hand mixer": (240, 240, 240), "rubber spatula": (220, 60, 60), "spatula": (40, 40, 44),
    "ladle": (170, 170, 176), "oven mitt": (200, 40, 40), "tongs": (170, 170, 176), "spoon": (190, 190, 196),
    "hands": (232, 190, 160),
}


@dataclass(frozen=True)
class Channel:
    slug: str
    name: str
    taste: str                     # sweet | savoury | drink
    dishes: tuple[str, ...]        # dish nouns for titles
    base: tuple[str, ...]          # base ingredients usually present
    finish: tuple[str, ...]        # cooking actions that finish the dish
    vessel: str                    # serving vessel


CHANNELS: list[Channel] = [
    Channel("bacon", "Bacon", "savoury", ("Bacon Bites", "Bacon Wraps", "Bacon Jam"), ("bacon", "brown sugar"), ("fry", "bake"), "plate"),
    Channel("bbq-and-grilling", "BBQ & Grilling", "savoury", ("Skewers", "Burgers", "Grilled Platter"), ("olive oil", "salt"), ("grill",), "plate"),
    Channel("beverages", "Beverages", "drink", ("Smoothie", "Lemonade", "Shake"), ("water", "sugar"), ("blend",), "glass"),
    Channel("bread", "Bread", "both", ("Loaf", "Flatbread", "Rolls"), ("flour", "water", "salt"), ("bake",), "plate"),
    Channel("breakfast", "Breakfast", "both", ("Pancakes", "Omelette", "Breakfast Bowl"), ("egg", "milk"), ("fry",), "plate"),
    Channel("cake", "Cake", "sweet", ("Cake", "Layer Cake", "Sheet Cake"), ("flour", "sugar", "egg", "butter"), ("bake",), "plate"),
    Channel("candy", "Candy", "sweet", ("Fudge", "Truffles", "Brittle"), ("sugar", "butter"), ("melt", "chill"), "plate"),
    Channel("canning-and-preserving", "Canning & Preserving", "both", ("Jam", "Pickles", "Chutney"), ("sugar", "water"), ("boil",), "jar"),
    Channel("cocktails-and-mocktails", "Cocktails & Mocktails", "drink", ("Cocktail", "Punch", "Spritzer"), ("water", "sugar"), ("chill",), "glass"),
    Channel("coffee", "Coffee", "drink", ("Latte", "Iced Coffee", "Frappe"), ("milk", "sugar"), ("blend",), "glass"),
    Channel("cookies", "Cookies", "sweet", ("Cookies", "Biscotti", "Shortbread"), ("flour", "sugar", "butter", "egg"), ("bake",), "plate"),
    Channel("cupcakes", "Cupcakes", "sweet", ("Cupcakes", "Muffins", "Mini Cakes"), ("flour", "sugar", "egg", "butter"), ("bake",), "plate"),
    Channel("dessert", "Dessert", "sweet", ("Pudding", "Parfait", "Cheesecake"), ("sugar", "heavy cream"), ("chill",), "glass"),
    Channel("homebrew", "Homebrew", "drink", ("Ginger Beer", "Cider", "Kombucha"), ("water", "sugar"), ("boil", "chill"), "jar"),
    Channel("main-course", "Main Course", "savoury", ("Casserole", "Skillet", "Roast"), ("olive oil", "salt", "garlic"), ("bake", "fry"), "plate"),
    Channel("pasta", "Pasta", "savoury", ("Pasta", "Spaghetti Bake", "Noodle Bowl"), ("spaghetti", "olive oil", "garlic"), ("boil",), "plate"),
    Channel("pie", "Pie", "sweet", ("Pie", "Tart", "Galette"), ("flour", "butter", "sugar"), ("bake",), "plate"),
    Channel("pizza", "Pizza", "savoury", ("Pizza", "Flatbread Pizza", "Calzone"), ("flour", "water", "olive oil", "mozzarella"), ("bake",), "plate"),
    Channel("salad", "Salad", "savoury", ("Salad", "Slaw", "Grain Bowl"), ("olive oil", "lemon"), ("mix",), "soup bowl"),
    Channel("sandwiches", "Sandwiches", "savoury", ("Sandwich", "Wrap", "Panini"), ("bread",), ("toast",), "plate"),
    Channel("sides", "Sides", "savoury", ("Side Dish", "Mash", "Fritters"), ("butter", "salt"), ("roast", "fry"), "plate"),
    Channel("snacks-and-appetizers", "Snacks & Appetizers", "both", ("Bites", "Dip", "Nachos"), ("salt",), ("bake", "fry"), "plate"),
    Channel("soups-and-stews", "Soups & Stews", "savoury", ("Soup", "Stew", "Chowder"), ("water", "onion", "salt"), ("boil", "simmer"), "soup bowl"),
    Channel("vegetarian-and-vegan", "Vegetarian & Vegan", "savoury", ("Bowl", "Curry", "Stir Fry"), ("olive oil", "garlic"), ("saute",), "soup bowl"),
]
CHANNEL_BY_SLUG = {c.slug: c for c in CHANNELS}
MIXTURE_NAMES = {"sweet": ("batter", "dough", "filling", "frosting", "mixture"),
                 "savoury": ("sauce", "dough", "filling", "marinade", "mixture"),
                 "drink": ("mixture", "syrup"), "both": ("batter", "mixture", "sauce")}
TITLE_ADJECTIVES = ("Easy", "Classic", "Quick", "Homemade", "Simple", "Best Ever", "Rustic", "Spicy",
                    "Grandma's", "Healthy", "Crispy", "Creamy", "One-Pot", "Mini", "Summer", "Holiday")
AUTHOR_FIRST = ("Passion", "Kitchen", "Chef", "Baker", "Mama", "Tasty", "Happy", "Hungry", "Little",
                "Urban", "Rustic", "Crafty", "Sunny", "Wild", "Lazy", "Golden")
AUTHOR_SECOND = ("Make", "Witch", "Tom", "Bee", "Cooks", "Bites", "Spoon", "Oven", "Fox", "Maker",
                 "Crumbs", "Ladle", "Sprout", "Pantry", "Whisk", "Kettle")

# -------------------------------------------------------------------------- non-food projects
NONFOOD_TITLES = ("Walnut Cutting Board From Scrap Wood", "Arduino Kitchen Timer", "LED Cake Stand",
                  "Epoxy River Coasters", "Pallet Wood Spice Rack", "Solar Powered Herb Lamp",
                  "3D Printed Cookie Cutter Holder", "Raspberry Pi Recipe Display", "Bamboo Utensil Organizer")
NONFOOD_MATERIALS = {"plywood": (214, 180, 130), "pine board": (230, 200, 150), "walnut plank": (110, 70, 40),
                     "acrylic sheet": (200, 230, 240), "circuit board": (30, 120, 60), "aluminium bar": (190, 194, 200)}
NONFOOD_SENTENCES = (
    "Cut the {mat} to {n} inches with a jigsaw.", "Sand all the edges with {g} grit sandpaper.",
    "Drill a {n} mm hole in each corner of the {mat}.", "Solder the LED and a 220 ohm resistor to the {mat}.",
    "Apply two coats of wood glue and clamp for {n} hours.", "Upload the sketch to the Arduino Nano and test it.",
    "Measure twice and mark the {mat} with a pencil.", "Finish the {mat} with mineral oil and let it dry.")
NONFOOD_STEP_TITLES = ("Materials", "Cutting", "Sanding", "Drilling", "Wiring", "Soldering", "Gluing",
                       "Finishing", "Testing", "Assembly")

# -------------------------------------------------------------------------- non-English pages
FOREIGN = {
    "es": {"title": ("{ing} al horno", "Sopa de {ing}", "Pastel de {ing}"),
           "intro": "Una receta fácil y deliciosa para toda la familia.",
           "steps": {"chop": "Picar {ing} en trozos pequeños.", "mix": "Mezclar {ing} en un bol grande.",
                     "bake": "Hornear a {temp} grados durante {time} minutos.", "boil": "Hervir {ing} durante {time} minutos.",
                     "fry": "Freír {ing} en una sartén con aceite.", "serve": "Servir caliente y disfrutar."},
           "titles": {"chop": "Picar", "mix": "Mezclar", "bake": "Hornear", "boil": "Hervir", "fry": "Freír", "serve": "Servir"},
           "ings": {"onion": "la cebolla", "tomato": "los tomates", "potato": "las patatas", "egg": "los huevos",
                    "flour": "la harina", "apple": "las manzanas", "carrot": "las zanahorias", "chicken breast": "el pollo"}},
    "de": {"title": ("{ing} aus dem Ofen", "{ing}suppe", "{ing}kuchen"),
           "intro": "Ein einfaches und leckeres Rezept für die ganze Familie.",
           "steps": {"chop": "{ing} in kleine Stücke schneiden.", "mix": "{ing} in einer großen Schüssel verrühren.",
                     "bake": "Bei {temp} Grad {time} Minuten backen.", "boil": "{ing} {time} Minuten kochen.",
                     "fry": "{ing} in einer Pfanne mit Öl anbraten.", "serve": "Warm servieren und genießen."},
           "titles": {"chop": "Schneiden", "mix": "Verrühren", "bake": "Backen", "boil": "Kochen", "fry": "Anbraten", "serve": "Servieren"},
           "ings": {"onion": "Zwiebel", "tomato": "Tomaten", "potato": "Kartoffel", "egg": "Eier",
                    "flour": "Mehl", "apple": "Apfel", "carrot": "Karotten", "chicken breast": "Hähnchen"}},
    "fr": {"title": ("Gratin de {ing}", "Soupe de {ing}", "Gâteau de {ing}"),
           "intro": "Une recette facile et délicieuse pour toute la famille.",
           "steps": {"chop": "Couper {ing} en petits morceaux.", "mix": "Mélanger {ing} dans un grand saladier.",
                     "bake": "Cuire au four à {temp} degrés pendant {time} minutes.", "boil": "Faire bouillir {ing} pendant {time} minutes.",
                     "fry": "Faire revenir {ing} dans une poêle avec de l'huile.", "serve": "Servir chaud et bon appétit."},
           "titles": {"chop": "Couper", "mix": "Mélanger", "bake": "Cuire", "boil": "Bouillir", "fry": "Revenir", "serve": "Servir"},
           "ings": {"onion": "l'oignon", "tomato": "les tomates", "potato": "les pommes de terre", "egg": "les œufs",
                    "flour": "la farine", "apple": "les pommes", "carrot": "les carottes", "chicken breast": "le poulet"}},
}

# -------------------------------------------------------------------------- noise material
OFFICE_JUNK = (
    "Normal 0 false false false EN-US X-NONE X-NONE MicrosoftInternetExplorer4",
    "<!--[if gte mso 9]><xml> <w:WordDocument> <w:View>Normal</w:View> <w:Zoom>0</w:Zoom> </w:WordDocument> </xml><![endif]-->",
    '/* Style Definitions */ table.MsoNormalTable {mso-style-name:"Table Normal"; mso-tstyle-rowband-size:0; '
    'mso-padding-alt:0in 5.4pt 0in 5.4pt; mso-para-margin:0in; font-size:10.0pt;}',
)
CSS_JUNK = ("{font-family:Arial, Helvetica, sans-serif; font-size:12px;}",
            "p { margin-bottom: 0.1in; direction: ltr; line-height: 120%; }",
            "{color:#333333; font-family:Verdana; text-align:left}")
URL_JUNK = ("http://www.myfoodblog.com/2013/05/{slug}.html", "https://bit.ly/2xK9{n}", "www.youtube.com/watch?v=dQw{n}",
            "http://pinterest.com/pin/{n}/")
HTML_JUNK = (("&nbsp;", " "), ("<br>", " "), ("<br />", " "), ("&nbsp;&nbsp;", " "), ("</p><p>", " "))
CONTROL_CHARS = ("\x07", "\x1b", "\x08", "\x7f")   # not whitespace to str.split(), so a parser keeps them
RARE_WORDS = tuple(sorted({w for i in INGREDIENTS if i.rare for w in (i.name, i.plural)}
                          | {"KitchenAid", "Pyrex", "Crisco", "chimichurri", "za'atar"}))
BRAND_SENTENCES = ("I used my KitchenAid for this.", "A Pyrex dish works best.",
                   "You can grease the pan with Crisco.", "Serve with chimichurri on the side.",
                   "A pinch of za'atar is nice too.")
