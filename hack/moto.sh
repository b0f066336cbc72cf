#!/usr/bin/env bash
# Starts moto_server (the AWS emulator the tests use) in the foreground, with
# the same fixes the tests start it with (hack/moto-launcher.py: launch
# template versions' user data parsed, so instances launch from them), so
# that the eks-asg and eks-managed drivers can be tried on it by hand.
#
#   hack/moto.sh                      # http://127.0.0.1:5000
#   MOTO_PORT=5123 hack/moto.sh       # another port
#   MOTO_HOST=0.0.0.0 hack/moto.sh    # listen beyond loopback
#
# Once moto answers, it makes a VPC and a subnet in us-east-1a (as the tests
# do) and prints the subnet's and an image's id for a NodeClass. Then run
# the node controller with --aws-endpoint-url=http://127.0.0.1:5000
# (docs/drivers/eks-asg.md, "Trying it on moto").
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
host="${MOTO_HOST:-127.0.0.1}"
port="${MOTO_PORT:-5000}"

python="$(command -v python3 || true)"
if [[ -z "${python}" ]] || ! "${python}" -c 'import moto.server' 2>/dev/null; then
  echo "moto is not installed for python3 on PATH: pip install 'moto[server]'" >&2
  exit 1
fi
echo "moto on http://${host}:${port} (with hack/moto-launcher.py's fixes); Ctrl-C stops it" >&2
"${python}" "${root}/hack/moto-launcher.py" -H "${host}" -p "${port}" &
moto=$!
trap 'kill "${moto}" 2>/dev/null || true' EXIT INT TERM
"${python}" - "http://127.0.0.1:${port}" <<'SEED'
import sys, time, boto3
endpoint = sys.argv[1]
ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=endpoint,
                   aws_access_key_id="testing", aws_secret_access_key="testing")
for _ in range(600):
    try:
        ec2.describe_regions()
        break
    except Exception:
        time.sleep(0.1)
vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
image = ec2.describe_images()["Images"][0]["ImageId"]
print(f"moto: region us-east-1, subnetIDs [{subnet}], imageID {image}; credentials aws_access_key_id=testing aws_secret_access_key=testing", file=sys.stderr)
SEED
wait "${moto}"
