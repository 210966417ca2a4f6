"""Procedural numpy/PIL rendering shared by the vision tracks.

- :mod:`.canvas` — ``Painter``: supersampled flat-colour polygons, circles, lines → uint8 arrays.
- :mod:`.domain` — ``sim`` (clean) and ``real`` (texture, noise, blur, light, occlusion) domains.
- :mod:`.pedestrian` — pedestrian scenes with controlled appearance/action/object/scene.
- :func:`contact_sheet` — tile images with captions into one PNG-ready picture.
- :mod:`.scene` — shape scenes on a room/door layout with a timed event script (``SceneSpec``,
  ``Scene`` renders any frame on demand with its ground truth), ``random_scene``, and
  ``ScenePrompt`` + ``realise`` (the spec as a text-to-image prompt). Pure numpy.

Everything is deterministic given its seed: same arguments, same bytes.
"""
from paperworks.core.render.canvas import PALETTE, Painter, circle_points, segment_polygon
from paperworks.core.render.domain import DOMAINS, RealStyle, apply_domain, to_real
from paperworks.core.render.pedestrian import (
    ACTIONS,
    BAGS,
    COLOURS,
    HEADWEAR,
    OBJECTS,
    SCENES,
    PedestrianSpec,
    is_consistent,
    render_clean,
    render_pedestrian,
)
from paperworks.core.render.scene import (
    FrameTruth,
    ObjectTruth,
    Scene,
    ScenePrompt,
    SceneSpec,
    ScriptConfig,
    random_scene,
    realise,
)
from paperworks.core.render.sheet import contact_sheet

__all__ = [
    "ACTIONS", "BAGS", "COLOURS", "DOMAINS", "HEADWEAR", "OBJECTS", "PALETTE", "SCENES",
    "FrameTruth", "ObjectTruth", "Painter", "PedestrianSpec", "RealStyle", "Scene", "ScenePrompt", "SceneSpec",
    "ScriptConfig", "apply_domain", "circle_points", "contact_sheet", "is_consistent", "random_scene", "realise",
    "render_clean", "render_pedestrian", "segment_polygon", "to_real",
]
