"""The composable parts the synthetic insurance catalogue is built from.

Body sites (formal name, lay names, kind), procedure families (formal template, lay
terms, which site kinds they apply to, variants), service categories (with lay terms
and coverage classes) and conditions (lay symptom phrases and the families that address
them, first-line family first). The catalogue, the queries and the graded labels are all
derived from this structure, never from word overlap.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Site:
    formal: str
    lay: tuple[str, ...]
    kind: str


@dataclass(frozen=True)
class Family:
    key: str
    category: str
    formal: str  # template with {site} and optionally {variant}
    lay: tuple[str, ...]
    kinds: tuple[str, ...]
    variants: tuple[tuple[str, str], ...] = (("", ""),)  # (formal variant, lay variant)


@dataclass(frozen=True)
class Category:
    key: str
    formal: str
    lay: tuple[str, ...]
    coverage: str


@dataclass(frozen=True)
class Condition:
    key: str
    kinds: tuple[str, ...]
    symptoms: tuple[str, ...]  # lay phrases with {site}
    families: tuple[str, ...]  # families that address it, first-line first
    lay_name: str


S = Site
SITES: tuple[Site, ...] = (
    # joints
    S("knee joint", ("knee",), "joint"), S("hip joint", ("hip",), "joint"),
    S("shoulder joint", ("shoulder",), "joint"), S("elbow joint", ("elbow",), "joint"),
    S("wrist joint", ("wrist",), "joint"), S("ankle joint", ("ankle",), "joint"),
    S("temporomandibular joint", ("jaw", "jaw hinge"), "joint"),
    S("metacarpophalangeal joint", ("knuckle", "finger joint"), "joint"),
    S("metatarsophalangeal joint", ("big toe", "toe joint"), "joint"),
    S("sacroiliac joint", ("tailbone area", "bottom of my spine"), "joint"),
    S("acromioclavicular joint", ("top of my shoulder", "collarbone joint"), "joint"),
    S("subtalar joint", ("heel joint", "back of my foot"), "joint"),
    # spine
    S("cervical spine", ("neck", "upper spine"), "spine"), S("thoracic spine", ("mid back", "upper back"), "spine"),
    S("lumbar spine", ("lower back", "low back"), "spine"), S("sacrum", ("base of my spine",), "spine"),
    # abdominal organs
    S("gallbladder", ("gallbladder", "right side under my ribs"), "abdomen"), S("liver", ("liver",), "abdomen"),
    S("pancreas", ("pancreas", "upper belly"), "abdomen"), S("stomach", ("stomach", "belly"), "abdomen"),
    S("colon", ("bowel", "gut"), "abdomen"), S("small intestine", ("intestines", "guts"), "abdomen"),
    S("appendix", ("appendix", "lower right belly"), "abdomen"), S("spleen", ("spleen", "left side under my ribs"), "abdomen"),
    S("esophagus", ("food pipe", "gullet"), "abdomen"), S("rectum", ("back passage", "rear end"), "abdomen"),
    # chest
    S("heart", ("heart", "ticker"), "chest"), S("lung", ("lungs", "chest"), "chest"),
    S("pleura", ("lining of my lungs", "chest wall"), "chest"), S("trachea", ("windpipe",), "chest"),
    S("mediastinum", ("middle of my chest",), "chest"), S("aortic valve", ("heart valve",), "chest"),
    # head and neck
    S("thyroid gland", ("thyroid", "front of my neck"), "headneck"), S("paranasal sinus", ("sinuses", "nose"), "headneck"),
    S("middle ear", ("ear", "eardrum"), "headneck"), S("larynx", ("voice box", "throat"), "headneck"),
    S("tonsil", ("tonsils",), "headneck"), S("salivary gland", ("spit gland", "cheek gland"), "headneck"),
    S("orbit", ("eye socket", "around my eye"), "headneck"), S("brain", ("head", "brain"), "headneck"),
    # pelvis
    S("urinary bladder", ("bladder",), "pelvis"), S("prostate gland", ("prostate",), "pelvis"),
    S("uterus", ("womb",), "pelvis"), S("ovary", ("ovaries",), "pelvis"),
    S("kidney", ("kidneys", "side of my back"), "pelvis"), S("ureter", ("tube from my kidney",), "pelvis"),
    S("testis", ("testicle",), "pelvis"), S("cervix", ("cervix",), "pelvis"),
    # skin and soft tissue
    S("skin of the face", ("face", "cheek skin"), "skin"), S("skin of the scalp", ("scalp",), "skin"),
    S("skin of the back", ("skin on my back",), "skin"), S("skin of the forearm", ("forearm skin", "arm skin"), "skin"),
    S("breast", ("breast", "chest lump area"), "skin"), S("skin of the lower leg", ("shin skin", "leg skin"), "skin"),
    S("subcutaneous tissue of the abdomen", ("belly fat area", "skin on my stomach"), "skin"),
    S("nail bed", ("toenail", "fingernail"), "skin"),
    # vessels and nerves
    S("carotid artery", ("neck artery", "artery in my neck"), "vessel"), S("femoral artery", ("leg artery", "groin artery"), "vessel"),
    S("great saphenous vein", ("leg veins", "varicose veins"), "vessel"), S("abdominal aorta", ("main artery in my belly",), "vessel"),
    S("coronary artery", ("heart arteries",), "vessel"), S("median nerve", ("nerve in my wrist", "hand nerve"), "vessel"),
    S("sciatic nerve", ("nerve down my leg", "sciatica nerve"), "vessel"), S("ulnar nerve", ("funny bone nerve",), "vessel"),
    # more sites (granular sub-sites give the paper's catalogue scale)
    S("coccyx", ("tailbone",), "spine"), S("duodenum", ("top of my small bowel",), "abdomen"),
    S("bile duct", ("bile tube",), "abdomen"), S("adrenal gland", ("gland above my kidney",), "abdomen"),
    S("mitral valve", ("heart flap",), "chest"), S("pericardium", ("sac around my heart",), "chest"),
    S("bronchus", ("airway", "breathing tubes"), "chest"), S("parathyroid gland", ("calcium gland",), "headneck"),
    S("nasal septum", ("inside of my nose", "nose wall"), "headneck"), S("vocal cord", ("vocal cords",), "headneck"),
    S("cervical lymph node", ("glands in my neck", "neck glands"), "headneck"), S("urethra", ("pee tube",), "pelvis"),
    S("fallopian tube", ("tubes",), "pelvis"), S("skin of the hand", ("hand skin",), "skin"),
    S("skin of the neck", ("neck skin",), "skin"), S("popliteal artery", ("artery behind my knee",), "vessel"),
    S("internal jugular vein", ("neck vein",), "vessel"), S("radial artery", ("wrist artery", "pulse artery"), "vessel"),
)

C = Category
CATEGORIES: tuple[Category, ...] = (
    C("adv_imaging", "advanced diagnostic imaging", ("scans", "an MRI or CT", "advanced imaging"), "outpatient diagnostic"),
    C("basic_imaging", "basic diagnostic imaging", ("x-rays", "imaging", "pictures"), "outpatient diagnostic"),
    C("aspiration", "aspiration and drainage", ("draining", "fluid removal"), "outpatient procedure"),
    C("injection", "therapeutic injection", ("injections", "shots"), "outpatient procedure"),
    C("biopsy", "tissue biopsy", ("a biopsy", "tissue testing"), "outpatient diagnostic"),
    C("endoscopy", "endoscopic evaluation", ("a scope", "a camera test"), "outpatient procedure"),
    C("mis_surgery", "minimally invasive surgery", ("keyhole surgery", "minor surgery"), "surgical"),
    C("open_surgery", "open surgical procedure", ("surgery", "an operation"), "inpatient surgical"),
    C("reconstruction", "reconstruction and replacement", ("a replacement", "reconstructive surgery"), "inpatient surgical"),
    C("ablation", "ablation and energy therapy", ("burning treatment", "laser treatment"), "outpatient procedure"),
    C("functional", "physiologic function testing", ("function tests", "a checkup test"), "outpatient diagnostic"),
    C("rehab", "rehabilitative therapy", ("physical therapy", "rehab"), "therapy"),
    C("nuclear", "nuclear medicine study", ("a nuclear scan", "a dye scan"), "outpatient diagnostic"),
    C("vascular", "vascular intervention", ("a stent or balloon", "vein treatment"), "surgical"),
)

ALL = ("joint", "spine", "abdomen", "chest", "headneck", "pelvis", "skin", "vessel")
F = Family
CON = (("with contrast material", "with dye"), ("without contrast material", "without dye"))
FAMILIES: tuple[Family, ...] = (
    F("mri", "adv_imaging", "magnetic resonance imaging of the {site} {variant}", ("an MRI", "a magnet scan"), ALL, CON),
    F("ct", "adv_imaging", "computed tomography of the {site} {variant}", ("a CT scan", "a cat scan"),
      ("joint", "spine", "abdomen", "chest", "headneck", "pelvis", "vessel"), CON),
    F("xray", "basic_imaging", "radiographic examination of the {site} {variant}", ("an x-ray",),
      ("joint", "spine", "chest", "abdomen"), (("two views", "two pictures"), ("complete series", "full set of pictures"))),
    F("us", "basic_imaging", "diagnostic ultrasonography of the {site} {variant}", ("an ultrasound", "a sonogram"),
      ("joint", "abdomen", "headneck", "pelvis", "skin", "vessel"), (("complete study", "full"), ("limited study", "quick"))),
    F("arthrocentesis", "aspiration", "arthrocentesis of the {site} {variant}", ("draining fluid", "a joint tap"),
      ("joint",), (("with ultrasound guidance", "with ultrasound"), ("without imaging guidance", ""))),
    F("drainage", "aspiration", "percutaneous drainage of fluid collection of the {site} {variant}", ("draining an abscess", "a drain"),
      ("abdomen", "chest", "pelvis", "skin"), (("with catheter placement", "with a tube"), ("needle aspiration only", "with a needle"))),
    F("cortico", "injection", "intra-articular corticosteroid injection of the {site} {variant}", ("a cortisone shot", "a steroid shot"),
      ("joint",), (("with ultrasound guidance", "with ultrasound"), ("with fluoroscopic guidance", "with x-ray guidance"))),
    F("epidural", "injection", "epidural steroid injection of the {site} {variant}", ("a spinal injection", "an epidural"),
      ("spine",), (("interlaminar approach", ""), ("transforaminal approach", ""))),
    F("nerveblock", "injection", "perineural anesthetic block of the {site} {variant}", ("a nerve block", "a numbing shot"), ("vessel",), (("single injection", "one shot"), ("continuous infusion catheter", "with a catheter"))),
    F("needlebx", "biopsy", "percutaneous needle biopsy of the {site} {variant}", ("a needle biopsy", "a biopsy"),
      ("abdomen", "chest", "headneck", "pelvis", "skin"), (("core needle", ""), ("fine needle aspiration", "fine needle"))),
    F("excbx", "biopsy", "excisional biopsy of lesion of the {site} {variant}", ("removing a sample", "cutting out a lump"), ("skin", "headneck"), (("up to 1 cm", "small"), ("over 1 cm", "large"))),
    F("endoscopy", "endoscopy", "diagnostic flexible endoscopy of the {site} {variant}", ("a scope", "a camera down"),
      ("abdomen", "headneck", "chest", "pelvis"), (("with biopsy", "with a sample"), ("without biopsy", "just a look"))),
    F("arthroscopy", "mis_surgery", "arthroscopic debridement of the {site} {variant}", ("scope surgery", "a knee scope"), ("joint",), (("limited", "small"), ("extensive", "big"))),
    F("laparoscopy", "mis_surgery", "{variant} laparoscopic partial resection of the {site}", ("keyhole surgery", "laparoscopic surgery"),
      ("abdomen", "pelvis"), (("", ""), ("robotic-assisted", "with the robot"))),
    F("excision", "open_surgery", "open excision of lesion of the {site} {variant}", ("surgery to remove it", "an operation"),
      ("abdomen", "chest", "headneck", "pelvis", "skin"), (("with primary closure", "with stitches"), ("with flap repair", "with a skin flap"))),
    F("decompression", "open_surgery", "open surgical decompression of the {site} {variant}", ("release surgery", "decompression surgery"),
      ("spine", "vessel"), (("single level", "one level"), ("multiple levels", "several levels"))),
    F("arthroplasty", "reconstruction", "total arthroplasty of the {site} {variant}", ("a joint replacement", "a new joint"),
      ("joint",), (("cemented prosthesis", "cemented"), ("uncemented prosthesis", "uncemented"))),
    F("fusion", "reconstruction", "arthrodesis of the {site} {variant}", ("a spinal fusion", "fusing the bones"),
      ("spine", "joint"), (("anterior approach", "from the front"), ("posterior approach", "from the back"))),
    F("repair", "reconstruction", "reconstructive repair of the {site} {variant}", ("a repair surgery", "reconstruction"),
      ("joint", "chest", "pelvis", "vessel"), (("primary repair", "stitched"), ("with graft", "with a graft"))),
    F("rfa", "ablation", "radiofrequency ablation of the {site} {variant}", ("burning the nerve", "an ablation"),
      ("spine", "chest", "abdomen", "headneck", "vessel"), (("", ""), ("with image guidance", "with imaging"))),
    F("laser", "ablation", "laser ablation of lesion of the {site} {variant}", ("laser treatment", "a laser"), ("skin", "vessel", "pelvis"), (("single session", "once"), ("multiple sessions", "several times"))),
    F("function", "functional", "physiologic function study of the {site} {variant}", ("a function test", "a test of how it works"),
      ("chest", "pelvis", "abdomen", "vessel", "headneck"), (("at rest", "resting"), ("with provocation", "with exercise"))),
    F("emg", "functional", "nerve conduction study of the {site} {variant}", ("a nerve test", "an EMG"), ("vessel", "spine"), (("with needle electromyography", "with needles"), ("surface recording only", "without needles"))),
    F("pt", "rehab", "therapeutic exercise program for the {site} {variant}", ("physical therapy", "PT sessions"),
      ("joint", "spine", "vessel"), (("initial evaluation", "first visit"), ("each 15 minutes", "ongoing sessions"))),
    F("manual", "rehab", "manual therapy techniques of the {site} {variant}", ("massage therapy", "manual therapy"), ("joint", "spine"), (("mobilization", "loosening"), ("manipulation", "cracking"))),
    F("scinti", "nuclear", "radionuclide scintigraphy of the {site} {variant}", ("a nuclear scan", "a bone scan"),
      ("joint", "spine", "chest", "headneck", "pelvis", "abdomen"), (("single area", "one spot"), ("with tomographic imaging", "3D"))),
    F("pet", "nuclear", "positron emission tomography of the {site} {variant}", ("a PET scan",), ("chest", "abdomen", "headneck", "pelvis"), (("limited area", "partial"), ("with concurrent computed tomography", "with CT"))),
    F("angioplasty", "vascular", "transluminal balloon angioplasty of the {site} {variant}", ("a balloon procedure", "opening the artery"), ("vessel",), (("", ""), ("with drug-coated balloon", "with a drug balloon"))),
    F("stent", "vascular", "endovascular stent placement of the {site} {variant}", ("a stent",), ("vessel",), (("bare metal stent", "metal"), ("drug-eluting stent", "drug coated"))),
    F("sclero", "vascular", "sclerotherapy of the {site} {variant}", ("vein injections", "vein treatment"), ("vessel", "skin"), (("single vein", "one vein"), ("multiple veins", "many veins"))),
)

K = Condition
CONDITIONS: tuple[Condition, ...] = (
    K("osteoarthritis", ("joint",), ("my {site} aches when I walk", "my {site} is stiff every morning", "grinding feeling in my {site}"),
      ("xray", "cortico", "pt", "arthroplasty", "manual"), "wear and tear arthritis"),
    K("effusion", ("joint",), ("my {site} is swollen and puffy", "fluid building up in my {site}", "my {site} looks like a balloon"),
      ("arthrocentesis", "us", "mri", "cortico"), "water on the joint"),
    K("tear", ("joint",), ("my {site} gave way playing soccer", "my {site} feels unstable and pops", "twisted my {site} and it locks"),
      ("mri", "arthroscopy", "repair", "pt"), "torn ligament"),
    K("disc", ("spine",), ("shooting pain from my {site} into my leg", "my {site} hurts when I bend", "numb tingling spreading from my {site}"),
      ("mri", "epidural", "pt", "decompression", "fusion"), "slipped disc"),
    K("facet", ("spine",), ("my {site} is achy and stiff after sitting", "dull ache in my {site} every day"),
      ("xray", "rfa", "manual", "pt"), "worn spinal joints"),
    K("mass_abd", ("abdomen", "pelvis"), ("doctor felt a lump near my {site}", "my {site} feels full and heavy", "lost weight and my {site} feels tight"),
      ("ct", "us", "needlebx", "laparoscopy", "excision", "pet"), "a growth"),
    K("bleed", ("abdomen",), ("I saw blood coming from my {site}", "dark stools and my {site} hurts"),
      ("endoscopy", "ct", "excision"), "internal bleeding"),
    K("inflam", ("abdomen", "pelvis"), ("burning pain in my {site} after eating", "cramps in my {site} that come and go", "my {site} hurts and I have a fever"),
      ("us", "ct", "endoscopy", "drainage", "laparoscopy"), "inflammation"),
    K("cough", ("chest",), ("I keep coughing and my {site} feels tight", "short of breath climbing stairs, my {site} feels weak", "wheezing from my {site} at night"),
      ("function", "xray", "ct", "endoscopy"), "breathing trouble"),
    K("nodule", ("chest", "headneck"), ("they found a spot on my {site}", "a small bump showed up near my {site}"),
      ("ct", "needlebx", "pet", "excision", "rfa"), "a nodule"),
    K("palpit", ("chest",), ("my {site} races and flutters", "skipped beats in my {site} when lying down"),
      ("function", "rfa", "mri", "scinti"), "an irregular heartbeat"),
    K("sinus", ("headneck",), ("stuffy {site} that never clears", "pressure behind my {site} and headaches", "my {site} keeps getting infected"),
      ("ct", "endoscopy", "function", "excision"), "a chronic infection"),
    K("urinary", ("pelvis",), ("it burns when I pee and my {site} aches", "I have to pee all night, something with my {site}", "trouble peeing, maybe my {site}"),
      ("us", "function", "endoscopy", "laser"), "a urinary problem"),
    K("skinlesion", ("skin",), ("a mole on my {site} changed color", "a sore on my {site} that will not heal", "a weird growth on my {site}"),
      ("excbx", "needlebx", "excision", "laser"), "a suspicious mole"),
    K("cyst", ("skin",), ("a painful swollen bump on my {site}", "pus coming out of a lump on my {site}"),
      ("us", "drainage", "excision"), "an infected cyst"),
    K("blockage", ("vessel",), ("my legs cramp when I walk, the doctor mentioned my {site}", "cold numb feet, problem with my {site}", "my {site} is narrowed they said"),
      ("us", "angioplasty", "stent", "ct", "function"), "a blocked artery"),
    K("veins", ("vessel",), ("bulging twisted {site} that ache", "my legs feel heavy because of my {site}"),
      ("us", "sclero", "laser", "rfa"), "swollen veins"),
    K("nerve", ("vessel",), ("pins and needles along my {site}", "my hand goes numb at night, maybe the {site}", "burning zaps along my {site}"),
      ("emg", "nerveblock", "decompression", "pt"), "a pinched nerve"),
    K("thyroidnod", ("headneck",), ("a swelling in my {site} when I swallow", "my {site} looks bigger than before"),
      ("us", "needlebx", "scinti", "excision"), "a goiter"),
)

FAMILY_BY_KEY = {f.key: f for f in FAMILIES}
CATEGORY_BY_KEY = {c.key: c for c in CATEGORIES}

# Templates per intent. {fam}/{cat}/{cond}: lay terms; {site}: lay site; {variant}: lay variant.
DIRECT_TEMPLATES = (
    "I need {fam} on my {site}{variant}", "can I get {fam} for my {site}{variant}", "looking to book {fam} of my {site}{variant}",
    "my doctor ordered {fam} for my {site}{variant}", "how do I schedule {fam}, it's for the {site}{variant}",
    "{site} {fam}{variant} please", "where can I have {fam} done on my {site}{variant}",
)
SYMPTOM_TEMPLATES = (
    "{symptom}", "{symptom} for a few weeks now", "{symptom}, what should I do", "for months {symptom}",
    "{symptom} and it is getting worse", "help, {symptom}",
)
COVERAGE_TEMPLATES = (
    "does my plan cover {fam} for my {site}{variant}", "is {fam} on my {site} covered by insurance",
    "will insurance pay for {cat} on my {site}", "what is covered for {cat} of the {site}",
    "my {site} has {cond}, is treatment covered", "do I have coverage for {cat} if I have {cond} in my {site}",
)
DISTRACTOR_TEMPLATES = ("my {other} is fine but ", "not my {other}, ", "after my {other} got better, ")
