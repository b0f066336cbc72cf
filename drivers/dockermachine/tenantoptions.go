package dockermachine

import (
	"fmt"
	"net/url"
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

// readsHostFile reports whether a text option (a string, or a list of
// them) may name a file or URL the plugin reads on the node controller's
// host, or an address it sends the class's credentials to: its name or
// usage says so, or its default value is a URL (softlayer-api-endpoint:
// "https://api.softlayer.com/rest/v3", where the plugin sends the class's
// API key with every call). A list is read like a single value: a plugin
// may take several files in one option, each given as an element.
func readsHostFile(flag mcnflag.Flag) bool {
	if !isTextFlag(flag) {
		return false
	}
	text := strings.ToLower(flag.String() + " " + usage(flag))
	if slices.ContainsFunc(hostReadWords, func(w string) bool { return strings.Contains(text, w) }) {
		return true
	}
	var defaults []string
	switch def := flag.Default().(type) {
	case string:
		defaults = []string{def}
	case []string:
		defaults = def
	}
	return slices.ContainsFunc(defaults, func(def string) bool {
		u, err := url.Parse(strings.TrimSpace(def))
		return err == nil && u.Scheme != "" && u.Host != ""
	})
}

// insecureWords are words of a switch's name or usage that say it turns
// off the checking of the plugin's TLS connections, which carry the class's
// credentials to its cloud: openstack-insecure ("Disable TLS credential
// checking."), amazonec2-insecure-transport ("Disable SSL when sending
// requests").
var insecureWords = []string{"insecure", "tls", "ssl", "verif"}

// weakensTransport reports whether a switch (a bool option) may turn off
// the checking of the TLS connections the plugin makes with the class's
// credentials: its name or usage says so. A tenant that sets it has the
// class's credentials sent where whoever is on the way reads them.
func weakensTransport(flag mcnflag.Flag) bool {
	switch flag.(type) {
	case mcnflag.BoolFlag, *mcnflag.BoolFlag:
	default:
		return false
	}
	text := strings.ToLower(flag.String() + " " + usage(flag))
	return slices.ContainsFunc(insecureWords, func(w string) bool { return strings.Contains(text, w) })
}

// isTextFlag reports whether an option takes text (a string, or a list of
// them), which may be a file path, a URL or a host: only int and bool
// options cannot.
func isTextFlag(flag mcnflag.Flag) bool {
	switch flag.(type) {
	case mcnflag.StringSliceFlag, *mcnflag.StringSliceFlag:
		return true
	}
	return isStringFlag(flag)
}

// tenantOverrideErrors refuses the tenantOverrides entries of a class that
// would let a NodeSet make the plugin, which runs as the node controller on
// its host, read what the node controller can read and send it to the
// tenant's machine: an option that takes a file path or URL (the node
// controller's service-account token, another class's key) or a URL its
// credentials go to, the whole options map while the class leaves a text
// option unset, and which option gets which key of the class's
// credentials. spec is the class's, or the effective spec of a NodeSet,
// whose entries are the class's.
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
						"%q cannot be listed: option %s takes a file path or URL, which the plugin reads on the node controller's host and sends to the machine, "+
							"or sends the class's credentials to; a NodeSet could name any file there, such as the node controller's service-account token", entry, option)
				}
				if flag, ok := byName[option]; ok && weakensTransport(flag) {
					return drivers.InvalidConfiguration(field,
						"%q cannot be listed: option %s may turn off the checking of the TLS connections the plugin sends the class's credentials over; "+
							"set it in the class", entry, option)
				}
				continue
			}
			// The whole map hands tenants every option the class does
			// not set, including ones nobody reviewed. Nothing a plugin
			// says of its flags tells for sure which text options name a
			// file, a URL or a host the class's credentials go to (words
			// miss softlayer-api-endpoint, vmwarevsphere-vcenter), so the
			// map brings tenants only options that cannot (int, bool);
			// text ones are set by the class or listed one by one.
			var open []string
			for _, f := range flags {
				if isTextFlag(f) && !classSets(dm, f.String()) && !slices.Contains(spec.TenantOverrides, "options."+f.String()) {
					open = append(open, f.String())
				}
			}
			if len(open) > 0 {
				slices.Sort(open)
				return drivers.InvalidConfiguration(field,
					"%q cannot be listed while the class leaves text options unset (%s): the plugin may read a file or URL such an option names on the node controller's host "+
						"and send it to the machine, or send the class's credentials to the address it names, and its flags do not say which; "+
						"set them in the class, or list the ones tenants may set one by one (options.<name>)", entry, strings.Join(open, ", "))
			}
			// Nor switches that turn off the checking of the plugin's
			// TLS connections, which carry the class's credentials.
			for _, f := range flags {
				if weakensTransport(f) && !classSets(dm, f.String()) {
					open = append(open, f.String())
				}
			}
			if len(open) > 0 {
				slices.Sort(open)
				return drivers.InvalidConfiguration(field,
					"%q cannot be listed while the class leaves unset options that may turn off the checking of the TLS connections the plugin sends the class's credentials over (%s): "+
						"set them in the class", entry, strings.Join(open, ", "))
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
