# moto_server with what it gets wrong and AWS does not fixed. The tests
# (test/framework/moto.go) and hack/moto.sh start moto through this file:
#
#   python3 hack/moto-launcher.py -H 127.0.0.1 -p 5000
#
# - CreateLaunchTemplateVersion stores the version's UserData as the raw
#   string, and launching an instance from that version then fails (moto
#   5.2.1 answers 500 to the SetDesiredCapacity that launches it).
#   CreateLaunchTemplate parses it; versions get the same here.
# - moto_server answers each request on its own thread, and its Auto Scaling
#   model reads and writes a group's instances and desired capacity without
#   a lock: concurrent TerminateInstanceInAutoScalingGroup calls lose
#   decrements, launch replacements, and drop instances from the group while
#   they keep running. Auto Scaling applies a group's changes one at a time.
#   Requests are answered one at a time here.
import sys
import threading
from moto.ec2.models import launch_templates
from moto.ec2.utils import parse_user_data

_create_version = launch_templates.LaunchTemplate.create_version


def create_version(self, data, description):
    if isinstance(data, dict) and isinstance(data.get("UserData"), (str, bytes)):
        data = dict(data)
        data["UserData"] = parse_user_data(data["UserData"])
    return _create_version(self, data, description)


launch_templates.LaunchTemplate.create_version = create_version

from moto.moto_server import werkzeug_app

_dispatch = werkzeug_app.DomainDispatcherApplication.__call__
_one_at_a_time = threading.Lock()


def dispatch(self, environ, start_response):
    with _one_at_a_time:
        return _dispatch(self, environ, start_response)


werkzeug_app.DomainDispatcherApplication.__call__ = dispatch

from moto.server import main

main(sys.argv[1:])
