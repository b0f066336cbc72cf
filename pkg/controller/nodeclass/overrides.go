package nodeclass

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	nodesetv1alpha1 "nodeset.dev/nodeset/apis/nodeset/v1alpha1"
	"nodeset.dev/nodeset/drivers"
	"nodeset.dev/nodeset/pkg/nodeutil"
	"nodeset.dev/nodeset/pkg/resolve"
)

// SpecErrors checks what the schema cannot afford: that tenantOverrides
// name fields of the driver section a NodeSet can set, that the labels,
// annotations and taints the class puts on Nodes are valid Kubernetes
// syntax and none of those nodeset itself writes on every Node, and that
// the allowedNamespaces selector is a valid label selector. The webhook
// refuses such a class at create and update time; the NodeClassController
// reports it as Valid=False.
func SpecErrors(spec *nodesetv1alpha1.NodeClassSpec) error {
	if err := SectionErrors(spec); err != nil {
		return err
	}
	if err := TenantOverrideErrors(spec); err != nil {
		return err
	}
	if errs := NodeTemplateErrors(spec); len(errs) > 0 {
		return fmt.Errorf("%w: %v", drivers.ErrInvalidConfiguration, errs.ToAggregate())
	}
	if spec.AllowedNamespaces != nil && spec.AllowedNamespaces.Selector != nil {
		path := field.NewPath("spec", "allowedNamespaces", "selector")
		if errs := metav1validation.ValidateLabelSelector(spec.AllowedNamespaces.Selector, metav1validation.LabelSelectorValidationOptions{}, path); len(errs) > 0 {
			return fmt.Errorf("%w: %v", drivers.ErrInvalidConfiguration, errs.ToAggregate())
		}
	}
	return nil
}

// DriverChangeError refuses an edit of a class that changes its driver.
// A Node's machine is its driver's (the nodeset.dev/driver annotation
// says which), and only that driver can remove it: under a class whose
// driver changed, the Nodes it already has would be handed to a driver
// that does not know their machines. Another driver is another class, as
// another provisioner is another StorageClass.
func DriverChangeError(old, cur *nodesetv1alpha1.NodeClassSpec) error {
	if old.Driver == cur.Driver {
		return nil
	}
	return fmt.Errorf("spec.driver: cannot change from %s to %s: the machines of the class's Nodes are driver %s's, and only it can remove them; "+
		"create a NodeClass under another name for driver %s, and move NodeSets to it", old.Driver, cur.Driver, old.Driver, cur.Driver)
}

// SectionErrors checks that a built-in driver section is set only with its
// driver's name: an out-of-tree driver is configured through spec.parameters.
// The schema says the same; the webhook checks it too, for its message.
func SectionErrors(spec *nodesetv1alpha1.NodeClassSpec) error {
	sections := []struct {
		set    bool
		field  string
		driver string
	}{
		{spec.Simulated != nil, "spec.simulated", nodesetv1alpha1.DriverSimulated},
		{spec.DockerMachine != nil, "spec.dockerMachine", nodesetv1alpha1.DriverDockerMachine},
		{spec.EKSAutoscalingGroup != nil, "spec.eksAutoscalingGroup", nodesetv1alpha1.DriverEKSASG},
		{spec.EKSManagedNodeGroup != nil, "spec.eksManagedNodeGroup", nodesetv1alpha1.DriverEKSManaged},
	}
	for _, section := range sections {
		if section.set && spec.Driver != section.driver {
			return drivers.InvalidConfiguration(section.field,
				"is only for spec.driver %s, not %q; an out-of-tree driver is configured through spec.parameters", section.driver, spec.Driver)
		}
	}
	return nil
}

// NodeTemplateErrors checks the labels, annotations and taints the class
// puts on its Nodes (spec.nodeTemplate, spec.simulated.labels, the labels
// and taints of spec.eksManagedNodeGroup) with the API machinery's rules, so
// that a class whose Nodes the API server would refuse is refused itself.
func NodeTemplateErrors(spec *nodesetv1alpha1.NodeClassSpec) field.ErrorList {
	template := field.NewPath("spec", "nodeTemplate")
	errs := metav1validation.ValidateLabels(spec.NodeTemplate.Labels, template.Child("labels"))
	errs = append(errs, apimachineryvalidation.ValidateAnnotations(spec.NodeTemplate.Annotations, template.Child("annotations"))...)
	if len(errs) == 0 {
		errs = append(errs, annotationBudgetErrors(spec, template.Child("annotations"))...)
	}
	for i, taint := range spec.NodeTemplate.Taints {
		errs = append(errs, taintErrors(taint.Key, taint.Value, template.Child("taints").Index(i))...)
	}
	errs = append(errs, nodesetOwnKeyErrors(spec)...)
	if spec.Simulated != nil {
		errs = append(errs, metav1validation.ValidateLabels(spec.Simulated.Labels, field.NewPath("spec", "simulated", "labels"))...)
	}
	if group := spec.EKSManagedNodeGroup; group != nil {
		path := field.NewPath("spec", "eksManagedNodeGroup")
		errs = append(errs, metav1validation.ValidateLabels(group.Labels, path.Child("labels"))...)
		for i, taint := range group.Taints {
			errs = append(errs, taintErrors(taint.Key, taint.Value, path.Child("taints").Index(i))...)
		}
	}
	return errs
}

// annotationBudgetErrors refuses class annotations that take more than
// a NodeSet's Nodes may get of template annotations
// (resolve.NodeAnnotationBudget, the rest of a Node's 256 KiB being left
// for what nodeset and the node's agents record there): such a class
// could serve no NodeSet, not even one without annotations of its own.
func annotationBudgetErrors(spec *nodesetv1alpha1.NodeClassSpec, path *field.Path) field.ErrorList {
	size := 0
	for k, v := range spec.NodeTemplate.Annotations {
		size += len(k) + len(v)
	}
	if size <= resolve.NodeAnnotationBudget {
		return nil
	}
	return field.ErrorList{field.Forbidden(path, fmt.Sprintf("the class's annotations take %d bytes, and the Nodes of a NodeSet may get at most %d bytes of template annotations "+
		"(a Node's annotations are at most %d bytes, and %d of them are left for what nodeset and the node's agents record there): no NodeSet of the class could have a Node",
		size, resolve.NodeAnnotationBudget, apimachineryvalidation.TotalAnnotationSizeLimitB, resolve.NodeAnnotationReserve))}
}

// nodesetOwnLabels are the labels nodeset sets on every Node of a NodeSet,
// whatever the class says: they tie the Node to its NodeSet, its class and
// its template, and seal the tie (LabelSeal).
var nodesetOwnLabels = []string{
	nodesetv1alpha1.LabelNodeSetNamespace, nodesetv1alpha1.LabelNodeSet,
	nodesetv1alpha1.LabelNodeClass, nodesetv1alpha1.LabelTemplateHash,
	nodesetv1alpha1.LabelSeal,
}

// nodesetOwnKeyErrors refuses what a class's nodeTemplate cannot do because
// nodeset itself writes and reads it on every Node: its identity labels
// (overwritten), the tenant label and NoSchedule taint of a Dedicated class
// (set to the NodeSet's namespace), the startup taints (a NoExecute one
// makes the API server refuse every Node, another effect is lifted when the
// kubelet is Ready) and the annotations under nodeset.dev/, where nodeset
// records a Node's state (when its machine was made, its drain, its
// deletion) and would read the class's value on every Node of the class.
// The restricted tenant label is nodeset's on every class. Other
// nodeset.dev keys (nodeset.dev/tenant on a Shared class,
// nodeset.dev/accelerator) stay the admin's.
func nodesetOwnKeyErrors(spec *nodesetv1alpha1.NodeClassSpec) field.ErrorList {
	template := field.NewPath("spec", "nodeTemplate")
	dedicated := spec.Tenancy == nodesetv1alpha1.TenancyDedicated
	var errs field.ErrorList
	for _, key := range slices.Sorted(maps.Keys(spec.NodeTemplate.Labels)) {
		switch {
		case slices.Contains(nodesetOwnLabels, key):
			errs = append(errs, field.Forbidden(template.Child("labels").Key(key),
				"nodeset sets this label on every Node, to tie it to its NodeSet, class and template; a class cannot set it"))
		case key == nodesetv1alpha1.LabelTenant && dedicated:
			errs = append(errs, field.Forbidden(template.Child("labels").Key(key),
				"on the Nodes of a Dedicated class nodeset sets this label to the NodeSet's namespace; a class cannot set it"))
		case key == nodesetv1alpha1.LabelTenantRestricted:
			errs = append(errs, field.Forbidden(template.Child("labels").Key(key),
				"nodeset sets this label on the Nodes of Dedicated classes to the NodeSet's namespace, and tenants' pods select it to land on their own Nodes "+
					"only; a class cannot set it (on a Shared class's Nodes it would draw a namespace's Dedicated pods there)"))
		}
	}
	for i, taint := range spec.NodeTemplate.Taints {
		path := template.Child("taints").Index(i).Child("key")
		switch {
		case nodeutil.IsStartupTaint(taint.Key):
			errs = append(errs, field.Forbidden(path, fmt.Sprintf(
				"%s is nodeset's startup taint: nodeset puts it on every new Node and lifts it when the kubelet reports Ready; a class cannot set it", taint.Key)))
		case taint.Key == nodesetv1alpha1.LabelTenant && dedicated && taint.Effect == string(corev1.TaintEffectNoSchedule):
			errs = append(errs, field.Forbidden(path, fmt.Sprintf(
				"on the Nodes of a Dedicated class nodeset sets the taint %s:NoSchedule to the NodeSet's namespace; a class cannot set it", taint.Key)))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(spec.NodeTemplate.Annotations)) {
		if strings.HasPrefix(key, nodesetv1alpha1.ReservedKeyPrefix) {
			errs = append(errs, field.Forbidden(template.Child("annotations").Key(key), fmt.Sprintf(
				"nodeset records a Node's state in annotations under %s and would read this value on every Node of the class; a class cannot set them",
				nodesetv1alpha1.ReservedKeyPrefix)))
		}
	}
	return errs
}

func taintErrors(key, value string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(key) {
		errs = append(errs, field.Invalid(path.Child("key"), key, msg))
	}
	for _, msg := range validation.IsValidLabelValue(value) {
		errs = append(errs, field.Invalid(path.Child("value"), value, msg))
	}
	return errs
}

// TenantOverrideErrors checks that every entry of spec.tenantOverrides names
// a field of the class's driver section (dotted for nested fields) that a
// NodeSet can set: a list is overridden whole, never element by element.
func TenantOverrideErrors(spec *nodesetv1alpha1.NodeClassSpec) error {
	var (
		section reflect.Type
		value   any
	)
	switch {
	case spec.Simulated != nil:
		section, value = reflect.TypeOf(nodesetv1alpha1.SimulatedMachine{}), spec.Simulated
	case spec.DockerMachine != nil:
		section, value = reflect.TypeOf(nodesetv1alpha1.DockerMachine{}), spec.DockerMachine
	case spec.EKSAutoscalingGroup != nil:
		section, value = reflect.TypeOf(nodesetv1alpha1.EKSAutoscalingGroup{}), spec.EKSAutoscalingGroup
	case spec.EKSManagedNodeGroup != nil:
		section, value = reflect.TypeOf(nodesetv1alpha1.EKSManagedNodeGroup{}), spec.EKSManagedNodeGroup
	default:
		return nil // out-of-tree parameters: free-form
	}
	classValues, err := jsonObject(value)
	if err != nil {
		return err
	}
	allowed := map[string]bool{}
	for _, path := range spec.TenantOverrides {
		allowed[path] = true
	}
	for i, path := range spec.TenantOverrides {
		parts := strings.Split(path, ".")
		if spec.DockerMachine != nil && (parts[0] == "credentialOptions" || parts[0] == "credentialFileOptions") {
			return drivers.InvalidConfiguration(fmt.Sprintf("spec.tenantOverrides[%d]", i),
				"%q cannot be listed: which plugin option gets which key of the class's credentials is the class's alone; "+
					"a NodeSet could send any of them to an option its own machine shows it", path)
		}
		if spec.Simulated != nil && parts[0] == "maxMachines" {
			return drivers.InvalidConfiguration(fmt.Sprintf("spec.tenantOverrides[%d]", i),
				"%q cannot be listed: it is the simulated cloud's room for the whole class; "+
					"a NodeSet that raised it would take room other NodeSets of the class count on", path)
		}
		exists, list := lookupField(section, parts)
		if list > 0 {
			whole := strings.Join(parts[:list], ".")
			return drivers.InvalidConfiguration(fmt.Sprintf("spec.tenantOverrides[%d]", i),
				"%q is a field of the elements of the list %s: list elements cannot be overridden piecewise; list the whole list (%s) instead",
				path, whole, whole)
		}
		if !exists {
			return drivers.InvalidConfiguration(fmt.Sprintf("spec.tenantOverrides[%d]", i),
				"%q is not a field of the driver section; fields are: %s", path, strings.Join(fieldNames(section), ", "))
		}
		if object, required := requiredBeside(section, classValues, parts, allowed); required != "" {
			return drivers.InvalidConfiguration(fmt.Sprintf("spec.tenantOverrides[%d]", i),
				"%q cannot be used: a NodeSet that sets it must also set %s, which the schema requires in %s, and the class does not set %s, "+
					"so that is an override no entry allows; list %s (or %s) too, or set %s in the class",
				path, required, object, object, required, object, object)
		}
	}
	return nil
}

// requiredBeside finds, along path, an object the class does not set
// (classValues is the class's driver section as JSON) and a field the
// schema requires in it (one whose JSON name has no omitempty) that path
// does not name and no entry of allowed lets tenants set. A NodeSet that
// sets path must set that field, and setting a field the class leaves out
// is an override: so no NodeSet can use path. It returns the object's and
// the field's paths, or "" when path can be used.
func requiredBeside(section reflect.Type, classValues map[string]any, path []string, allowed map[string]bool) (object, required string) {
	t, values := section, classValues
	for depth := 0; depth < len(path)-1; depth++ {
		prefix := strings.Join(path[:depth+1], ".")
		if allowed[prefix] {
			return "", "" // tenants may set the whole object
		}
		f, ok := fieldByJSONName(t, path[depth])
		if !ok {
			return "", ""
		}
		t = f.Type
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return "", "" // a map key: maps have no required keys
		}
		next, set := values[path[depth]].(map[string]any)
		if !set {
			for i := range t.NumField() {
				name, omitempty := jsonTag(t.Field(i))
				if name != "" && !omitempty && name != path[depth+1] && !allowed[prefix+"."+name] {
					return prefix, prefix + "." + name
				}
			}
		}
		values = next
	}
	return "", ""
}

func fieldByJSONName(t reflect.Type, name string) (reflect.StructField, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return reflect.StructField{}, false
	}
	for i := range t.NumField() {
		if jsonName(t.Field(i)) == name {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

func jsonObject(v any) (map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	return out, json.Unmarshal(raw, &out)
}

// lookupField says whether path names a field of t that can be overridden.
// When path goes on past a list, list is the number of its leading parts
// that name the list (and exists is false); otherwise list is 0.
func lookupField(t reflect.Type, path []string) (exists bool, list int) {
	for depth := 0; ; depth++ {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if depth == len(path) {
			return true, 0
		}
		switch t.Kind() {
		case reflect.Slice:
			return false, depth
		case reflect.Map:
			// A listed map key (tags.team): any key is a field of a map,
			// and what follows the map is one key, dots and all
			// (tags.example.com/owner), when its values are not objects.
			if hasFields(t.Elem()) {
				return depth == len(path)-1, 0
			}
			return true, 0
		case reflect.Struct:
			next := reflect.Type(nil)
			for i := range t.NumField() {
				if jsonName(t.Field(i)) == path[depth] {
					next = t.Field(i).Type
					break
				}
			}
			if next == nil {
				return false, 0
			}
			t = next
		default:
			return false, 0
		}
	}
}

// hasFields says whether values of t are JSON objects or lists, whose
// fields or elements a path could go on into; a quantity, which is a
// struct that writes itself as a string, is not.
func hasFields(t reflect.Type) bool {
	if t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler) {
		return false
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice, reflect.Pointer:
		return true
	}
	return false
}

var jsonMarshaler = reflect.TypeFor[json.Marshaler]()

func fieldNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		if name := jsonName(t.Field(i)); name != "" {
			names = append(names, name)
		}
	}
	return names
}

func jsonName(f reflect.StructField) string {
	name, _ := jsonTag(f)
	return name
}

// jsonTag is a field's JSON name ("" for none) and whether it is omitempty.
func jsonTag(f reflect.StructField) (name string, omitempty bool) {
	name, options, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "-" {
		return "", false
	}
	return name, slices.Contains(strings.Split(options, ","), "omitempty")
}

// overrideRisks are the tenantOverrides entries that reach a Node's labels
// and taints, the kubelet's command line or its trust, a machine's boot,
// identity or network, by the class's driver, with what an admin should
// know before listing them.
var overrideRisks = map[string]map[string]string{
	nodesetv1alpha1.DriverSimulated: {
		"labels": "tenants may add Node labels through spec.simulated.labels; keys under nodeset.dev and in the kubernetes.io and k8s.io domains stay refused",
	},
	nodesetv1alpha1.DriverEKSManaged: {
		"labels":                            "tenants may add Node labels through spec.eksManagedNodeGroup.labels; keys under nodeset.dev and in the kubernetes.io and k8s.io domains stay refused",
		"taints":                            "tenants may add Node taints through spec.eksManagedNodeGroup.taints; keys under nodeset.dev and in the kubernetes.io and k8s.io domains stay refused",
		"remoteAccess":                      "tenants may open SSH to their nodes and name the security groups allowed to reach it",
		"remoteAccess.ec2SSHKey":            "tenants may log in to their nodes over SSH with a key pair of their choosing, as a user who can become root",
		"remoteAccess.sourceSecurityGroups": "tenants name the security groups allowed to reach their nodes over SSH",
		"nodeRole":                          "tenants choose the IAM role their nodes run with",
		"subnets":                           "tenants choose the network their nodes sit in",
		"launchTemplate":                    "tenants choose the launch template: its user data runs as root at boot, and it may set the AMI, key pair, security groups and instance metadata options",
		"launchTemplate.id":                 "tenants choose the launch template: its user data runs as root at boot, and it may set the AMI, key pair, security groups and instance metadata options",
		"launchTemplate.name":               "tenants choose the launch template: its user data runs as root at boot, and it may set the AMI, key pair, security groups and instance metadata options",
		"launchTemplate.version":            "tenants choose which version of the launch template their nodes boot, old ones included",
	},
	nodesetv1alpha1.DriverEKSASG: {
		"bootstrap":                               "tenants may change how nodes join the cluster, including the API server endpoint and CA they trust, the cluster DNS address, kubelet flags and commands run as root at boot",
		"bootstrap.kubeletExtraArgs":              "tenants may pass kubelet flags that size the Node (" + strings.Join(resolve.TenantKubeletFlags, ", ") + "); --node-labels, --register-with-taints and every other flag stay refused",
		"bootstrap.preBootstrapCommands":          "tenants run commands as root on each node before it joins the cluster",
		"bootstrap.apiServerEndpoint":             "tenants choose the API server their kubelets join and send their credentials to",
		"bootstrap.certificateAuthority":          "tenants choose the CA their kubelets trust for the API server",
		"bootstrap.serviceCIDR":                   "tenants choose the cluster DNS address every pod on their nodes sends its queries to",
		"imageID":                                 "tenants choose the AMI their nodes boot, and with it everything that runs as root there",
		"keyName":                                 "tenants may log in to their nodes over SSH with a key pair of their choosing, as a user who can become root",
		"instanceProfile":                         "tenants choose the IAM role their instances run with",
		"securityGroupIDs":                        "tenants choose the network their nodes sit in",
		"subnetIDs":                               "tenants choose the network their nodes sit in",
		"metadataOptions":                         "tenants may let every pod on their nodes reach the instance metadata service and the instance role's credentials (httpTokens optional, a hop limit above 1)",
		"metadataOptions.httpTokens":              "tenants may let every pod on their nodes reach the instance metadata service and the instance role's credentials without a session token",
		"metadataOptions.httpPutResponseHopLimit": "tenants may let every pod on their nodes reach the instance metadata service and the instance role's credentials",
	},
	nodesetv1alpha1.DriverDockerMachine: {
		"driverName":                "tenants choose which docker-machine plugin on the node controller's PATH makes their machines, and where (another cloud, or SSH to a host of their choosing with the generic driver); the class's options go to that plugin",
		"options":                   "tenants may set every option of the docker-machine plugin the class does not set, including ones that choose where machines run and who can reach them; allowed only while every text option is set by the class or listed by name (options.<name>), and every switch that turns off TLS checking is set by the class",
		"provisioning":              "tenants may change the join script run on each machine",
		"provisioning.script":       "tenants choose the join script, run as root on each machine with its bootstrap token",
		"provisioning.apiServerURL": "tenants choose the API server their kubelets join and send their bootstrap token to",
	},
}

// sharedRisk is added to each warning of a Shared class.
const sharedRisk = "; the class is Shared, so other namespaces' pods run on these nodes and are exposed to it too (tenancy: Dedicated keeps them off)"

// OverrideWarnings are admission warnings for the tenantOverrides of a class
// that give tenants more than the machine's shape: what they reach, and what
// nodeset still refuses there. They do not refuse the class: an admin may
// mean it.
func OverrideWarnings(spec *nodesetv1alpha1.NodeClassSpec) []string {
	risks := overrideRisks[spec.Driver]
	var out []string
	shared := spec.Tenancy != nodesetv1alpha1.TenancyDedicated
	for i, entry := range spec.TenantOverrides {
		if risk, ok := risks[entry]; ok {
			if shared {
				risk += sharedRisk
			}
			out = append(out, fmt.Sprintf("spec.tenantOverrides[%d] %q: %s", i, entry, risk))
		}
	}
	return out
}
