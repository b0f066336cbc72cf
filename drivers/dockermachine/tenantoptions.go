package dockermachine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rancher/machine/libmachine/mcnflag"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
)

// hostReadWords are words of a text option's name or usage that say the
// plugin reads a file, or fetches a URL, from the host it runs on (the
// node controller's) and hands it to the machine or its cloud:
// generic-ssh-key, amazonec2-ssh-keypath, amazonec2-userdata,
// vmwarevsphere-cloudinit, openstack-cacert, ...
var hostReadWords = []string{
	"path", "file", "dir", "url", "uri", "userdata", "user-data", "cloudinit", "cloud-init",
	"custom-data", "cert", "ssh-key", "private-key", "script",
}

// readsHostFile reports whether a text option may name a file or URL the
// plugin reads on the node controller's host.
func readsHostFile(flag mcnflag.Flag) bool {
	if !isStringFlag(flag) {
		return false
	}
	text := strings.ToLower(flag.String() + " " + usage(flag))
	return slices.ContainsFunc(hostReadWords, func(w string) bool { return strings.Contains(text, w) })
}

// tenantOverrideErrors refuses the tenantOverrides entries of a class that
// would let a NodeSet make the plugin, which runs as the node controller on
// its host, read what the node controller can read and send it to the
// tenant's machine: an option that takes a file path or URL (the node
// controller's service-account token, another class's key), the whole
// options map while the class leaves such an option unset, and which
// option gets which key of the class's credentials. spec is the class's,
// or the effective spec of a NodeSet, whose entries are the class's.
func tenantOverrideErrors(spec *nodesetv1alpha1.NodeClassSpec, flags []mcnflag.Flag) error {
	dm := spec.DockerMachine
	byName := map[string]mcnflag.Flag{}
	for _, f := range flags {
		byName[f.String()] = f
	}
	for i, entry := range spec.TenantOverrides {
		field := fmt.Sprintf("spec.tenantOverrides[%d]", i)
		top, option, _ := strings.Cut(entry, ".")
		switch top {
		case "credentialOptions", "credentialFileOptions":
			return drivers.InvalidConfiguration(field,
				"%q cannot be listed: which plugin option gets which key of the class's credentials is the class's alone; "+
					"a NodeSet could send any of them to an option its own machine shows it", entry)
		case "options":
			if option != "" {
				if flag, ok := byName[option]; ok && readsHostFile(flag) {
					return drivers.InvalidConfiguration(field,
						"%q cannot be listed: option %s takes a file path or URL, which the plugin reads on the node controller's host and sends to the machine; "+
							"a NodeSet could name any file there, such as the node controller's service-account token", entry, option)
				}
				continue
			}
			var open []string
			for _, f := range flags {
				if readsHostFile(f) && !classSets(dm, f.String()) {
					open = append(open, f.String())
				}
			}
			if len(open) > 0 {
				slices.Sort(open)
				return drivers.InvalidConfiguration(field,
					"%q cannot be listed while the class leaves options that take a file path or URL unset (%s): the plugin reads them on the node controller's host "+
						"and sends them to the machine, so a NodeSet could name any file there, such as the node controller's service-account token; "+
						"list the options tenants may set one by one (options.<name>), or set those in the class", entry, strings.Join(open, ", "))
			}
		}
	}
	return nil
}

// classSets reports whether a class gives an option its value itself, which
// a NodeSet allowed the whole options map cannot change.
func classSets(dm *nodesetv1alpha1.DockerMachine, option string) bool {
	_, inOptions := dm.Options[option]
	_, inCredentials := dm.CredentialOptions[option]
	_, inFiles := dm.CredentialFileOptions[option]
	userData := dm.Provisioning != nil && dm.Provisioning.Method == nodesetv1alpha1.ProvisioningUserData && dm.Provisioning.UserDataOption == option
	return inOptions || inCredentials || inFiles || userData
}
