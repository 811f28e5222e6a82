"""NoETL Cloud: the Google Cloud serverless form of the NoETL workflow runtime.

Importing the package has no side effects: nothing connects, nothing reads the environment.
"""

__version__ = "0.1.0"
