"""lagwatch: Kafka consumer-lag monitoring and alerting.

Data flows one way: collect -> snapshot -> history -> rules -> alerts -> notify.
"""

from lagwatch import native as _native  # first: chooses the compiled core or its source before either is imported

__version__ = "0.1.0"
CORE = _native.CORE
