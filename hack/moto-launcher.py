# moto_server with what it gets wrong and AWS does not fixed. The tests
# (test/framework/moto.go) and hack/moto.sh start moto through this file:
#
#   python3 hack/moto-launcher.py -H 127.0.0.1 -p 5000
#
# - CreateLaunchTemplateVersion stores the version's UserData as the raw
#   string, and launching an instance from that version then fails (moto
#   5.2.1 answers 500 to the SetDesiredCapacity that launches it).
#   CreateLaunchTemplate parses it; versions get the same here.
import sys
from moto.ec2.models import launch_templates
from moto.ec2.utils import parse_user_data

_create_version = launch_templates.LaunchTemplate.create_version


def create_version(self, data, description):
    if isinstance(data, dict) and isinstance(data.get("UserData"), (str, bytes)):
        data = dict(data)
        data["UserData"] = parse_user_data(data["UserData"])
    return _create_version(self, data, description)


launch_templates.LaunchTemplate.create_version = create_version

from moto.server import main

main(sys.argv[1:])
