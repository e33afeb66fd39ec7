"""The chapters' former machinery, being dissolved into the chapters themselves (each
chapter's experiment, figures and claims live in its ``book/<chapter>.md``); what chapters
share is in :mod:`hetfl_core.book`."""
from ..book import *  # noqa: F401,F403
from ..book import ParameterError, caption, caption_text, check_parameters, injected_parameters  # noqa: F401
