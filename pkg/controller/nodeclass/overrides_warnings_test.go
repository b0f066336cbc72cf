package nodeclass

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/utils/ptr"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
)

// TestOverrideWarningsNameEveryEscape: each tenantOverrides entry that lets
// a tenant run code as root on its nodes, choose what they trust, who may
// log in, their IAM role, network or metadata service, is warned about;
// on a Shared class the warning says other namespaces' pods are exposed
// too. The machine's shape is not warned about.
func TestOverrideWarningsNameEveryEscape(t *testing.T) {
	tests := []struct {
		driver  string
		entries []string
	}{
		{nodesetv1alpha1.DriverEKSASG, []string{
			"bootstrap", "bootstrap.kubeletExtraArgs", "bootstrap.preBootstrapCommands", "bootstrap.apiServerEndpoint",
			"bootstrap.certificateAuthority", "bootstrap.serviceCIDR", "imageID", "keyName", "instanceProfile",
			"securityGroupIDs", "subnetIDs", "metadataOptions", "metadataOptions.httpTokens", "metadataOptions.httpPutResponseHopLimit",
		}},
		{nodesetv1alpha1.DriverEKSManaged, []string{
			"labels", "taints", "remoteAccess", "remoteAccess.ec2SSHKey", "remoteAccess.sourceSecurityGroups",
			"nodeRole", "subnets", "launchTemplate", "launchTemplate.id", "launchTemplate.name", "launchTemplate.version",
		}},
		{nodesetv1alpha1.DriverDockerMachine, []string{"driverName", "options", "provisioning", "provisioning.script", "provisioning.apiServerURL"}},
	}
	for _, tt := range tests {
		for _, tenancy := range []nodesetv1alpha1.Tenancy{"", nodesetv1alpha1.TenancyShared, nodesetv1alpha1.TenancyDedicated} {
			t.Run(tt.driver+"/"+string(tenancy), func(t *testing.T) {
				spec := &nodesetv1alpha1.NodeClassSpec{Driver: tt.driver, Tenancy: tenancy, TenantOverrides: tt.entries}
				warnings := OverrideWarnings(spec)
				if !assert.Len(t, warnings, len(tt.entries), "%s", strings.Join(warnings, "\n")) {
					return
				}
				for i, entry := range tt.entries {
					assert.Contains(t, warnings[i], `"`+entry+`"`)
					if tenancy == nodesetv1alpha1.TenancyDedicated {
						assert.NotContains(t, warnings[i], "Shared")
					} else {
						assert.Contains(t, warnings[i], "other namespaces' pods run on these nodes")
					}
				}
			})
		}
	}

	shape := &nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverEKSASG,
		TenantOverrides: []string{"instanceType", "mixedInstances.instanceTypes", "tags.team", "bootstrap.format"}}
	assert.Empty(t, OverrideWarnings(shape))
	kubelet := OverrideWarnings(&nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverEKSASG, TenantOverrides: []string{"bootstrap.kubeletExtraArgs"}})
	if assert.Len(t, kubelet, 1) {
		assert.Contains(t, kubelet[0], "--max-pods")
		assert.NotContains(t, kubelet[0], "is not checked")
	}
}

// TestTenantOverridesNeverRouteCredentials: a class may not let tenants
// say which docker-machine option gets which key of its credentials
// Secret: a NodeSet would send any key to an option its machine shows it.
func TestTenantOverridesNeverRouteCredentials(t *testing.T) {
	for _, entry := range []string{"credentialOptions", "credentialOptions.fake-tags", "credentialFileOptions", "credentialFileOptions.fake-userdata"} {
		spec := &nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverDockerMachine, TenantOverrides: []string{"options.fake-cpus", entry},
			DriverSections: nodesetv1alpha1.DriverSections{DockerMachine: &nodesetv1alpha1.DockerMachine{DriverName: "fake"}}}
		err := TenantOverrideErrors(spec)
		if assert.Error(t, err, entry) {
			assert.Contains(t, err.Error(), `spec.tenantOverrides[1]: "`+entry+`" cannot be listed`)
		}
	}
}

// TestTenantOverridesNeverRaiseTheSimulatedRoom: maxMachines is the
// simulated cloud's room for the whole class; a NodeSet may not set its own.
func TestTenantOverridesNeverRaiseTheSimulatedRoom(t *testing.T) {
	spec := &nodesetv1alpha1.NodeClassSpec{Driver: nodesetv1alpha1.DriverSimulated, TenantOverrides: []string{"capacity", "maxMachines"},
		DriverSections: nodesetv1alpha1.DriverSections{Simulated: &nodesetv1alpha1.SimulatedMachine{MaxMachines: ptr.To[int32](2)}}}
	err := TenantOverrideErrors(spec)
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), `spec.tenantOverrides[1]: "maxMachines" cannot be listed`)
	}
	spec.TenantOverrides = []string{"capacity", "failurePercent"}
	assert.NoError(t, TenantOverrideErrors(spec), "the other fields of the section may be listed")
}
