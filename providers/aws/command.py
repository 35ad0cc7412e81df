"""``eni-ipam aws-iam-policy``: the AWS provider's IAM policy, scoped to one cluster (docs/aws.md §2);
``eni-ipam max-pods``: the pods a node of an EC2 instance type can run (docs/aws.md "Max pods").

Registered under the ``eni_ipam.commands`` entry points (pyproject.toml), so the command line finds
it without importing the provider. This module imports only the standard library at load time: the
command line loads it at every start; the policy's module is imported when an option is checked or
the command runs.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eni_ipam.core.model import InstanceLimits


def _policy_input(field: str) -> Callable[[str], str]:
    """An argparse type checking one input of the IAM policy: argparse names the option in the error."""

    def check(text: str) -> str:
        from providers.aws.iam_policy import PATTERNS

        pattern, shape = PATTERNS[field]
        if not pattern.fullmatch(text):
            raise argparse.ArgumentTypeError(f"{text!r} is not {shape}")
        return text

    return check


OPTIONS = {
    "cluster_name": "--cluster-name",
    "instance_tag": "--instance-tag",
    "subnet_ids": "--subnet-id",
    "security_group_ids": "--security-group-id",
    "interface_tag_keys": "--interface-tag-key",
}
"""The option of each input the policy's renderer may refuse, to name it as argparse would."""


class IamPolicyCommand:
    help = "print the AWS provider's IAM policy, scoped to one cluster (docs/aws.md §2)"
    description = (
        "Print the IAM policy the controller's role needs, as JSON, scoped to one cluster's VPC, "
        "subnets, security groups and instances (docs/aws.md §2)."
    )
    examples = (
        (
            "eni-ipam aws-iam-policy --account-id 123456789012 --region eu-west-1 --vpc-id vpc-0abc "
            "--cluster-name prod --subnet-id subnet-0a --security-group-id sg-0a",
            "the policy of one cluster",
        ),
        (
            "eni-ipam aws-iam-policy ... --interface-tag-key team > policy.json",
            "allowing a tag of settings.interface_tags on new interfaces",
        ),
    )

    def __init__(self) -> None:
        self.parser: argparse.ArgumentParser | None = None

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser
        parser.add_argument("--account-id", required=True, type=_policy_input("account_id"), help="12 digits")
        parser.add_argument("--region", required=True, type=_policy_input("region"), help="e.g. eu-west-1")
        parser.add_argument("--vpc-id", required=True, type=_policy_input("vpc_id"), help="the cluster's VPC")
        parser.add_argument("--cluster-name", required=True, help="settings.cluster_name of the controller")
        parser.add_argument(
            "--subnet-id",
            dest="subnet_ids",
            action="append",
            required=True,
            type=_policy_input("subnet_ids"),
            metavar="SUBNET_ID",
            help="a subnet eni-ipam fills or creates interfaces in, the nodes' own too (repeat the option)",
        )
        parser.add_argument(
            "--security-group-id",
            dest="security_group_ids",
            action="append",
            required=True,
            type=_policy_input("security_group_ids"),
            metavar="GROUP_ID",
            help="a security group new interfaces get (repeat the option)",
        )
        parser.add_argument(
            "--partition", default="aws", type=_policy_input("partition"), help="aws (default)"
        )
        parser.add_argument(
            "--instance-tag",
            default=None,
            metavar="KEY=VALUE",
            help="the tag of the cluster's instances (default: kubernetes.io/cluster/<cluster-name>=owned)",
        )
        parser.add_argument(
            "--interface-tag-key",
            dest="interface_tag_keys",
            action="append",
            default=[],
            metavar="KEY",
            help="a key of settings.interface_tags, allowed on new interfaces (repeat the option)",
        )

    def run(self, args: argparse.Namespace) -> int:
        from providers.aws.iam_policy import PolicyInputError, parse_instance_tag, render_policy

        assert self.parser is not None  # the command line adds the arguments before it runs
        try:
            tag = None if args.instance_tag is None else parse_instance_tag(args.instance_tag)
            policy = render_policy(
                account_id=args.account_id,
                region=args.region,
                vpc_id=args.vpc_id,
                cluster_name=args.cluster_name,
                subnet_ids=args.subnet_ids,
                security_group_ids=args.security_group_ids,
                partition=args.partition,
                instance_tag=tag,
                interface_tag_keys=args.interface_tag_keys,
            )
        except PolicyInputError as exc:
            self.parser.error(f"{OPTIONS.get(exc.field, exc.field)}: {exc}")  # exits 2
        print(json.dumps(policy, indent=2))
        return 0


IAM_POLICY = IamPolicyCommand()


def _cards(text: str) -> tuple[int, ...]:
    """The pool's cards as the node spec's ``network_cards`` takes them (its bounds, each card once)."""
    from eni_ipam.config.schema import validate
    from eni_ipam.core.spec import NodeSpec
    from eni_ipam.errors import ConfigError

    try:
        cards = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of card indexes") from None
    try:
        return validate(NodeSpec, {"network_cards": cards}).network_cards
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a non-negative integer")
    return int(text)


class MaxPodsCommand:
    help = "print the pods a node of an EC2 instance type can run, as a pool spec sizes it (docs/aws.md)"
    description = (
        "Print the most pods a node of each EC2 instance type can run with an address each, from the "
        "shipped limits table, as a pool spec with these options sizes it; and why it differs from "
        'the VPC CNI\'s table when it does (docs/aws.md, "Max pods").'
    )
    examples = (
        ("eni-ipam max-pods m5.large m5.xlarge", "two types, the default pool"),
        ("eni-ipam max-pods m5.large --prefix-delegation", "with /28 prefixes"),
        ("eni-ipam max-pods c6in.32xlarge --network-cards 0,1 --json", "two network cards, as JSON"),
    )

    def __init__(self) -> None:
        self.parser: argparse.ArgumentParser | None = None

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser
        parser.add_argument("instance_types", nargs="+", metavar="INSTANCE_TYPE", help="e.g. m5.large")
        parser.add_argument(
            "--prefix-delegation", action="store_true", help="/28 prefixes (settings.prefix_delegation)"
        )
        parser.add_argument(
            "--first-interface-index", type=_count, default=0, help="the pool's first_interface_index (0)"
        )
        parser.add_argument(
            "--network-cards", type=_cards, default=(0,), metavar="CARDS", help="the pool's cards (0)"
        )
        parser.add_argument(
            "--max-allocate", type=_count, default=0, help="the pool's max_allocate (0: none)"
        )
        parser.add_argument(
            "--host-network-pods",
            type=_count,
            default=2,
            help="pods without a pool address (2: the node agent and kube-proxy)",
        )
        parser.add_argument("--json", action="store_true", help="one JSON object a type")

    def run(self, args: argparse.Namespace) -> int:
        from eni_ipam.config.suggest import did_you_mean
        from eni_ipam.core.watermarks import max_pods
        from providers.ec2.limits import instance_limits, load_limits

        assert self.parser is not None
        unknown = [t for t in args.instance_types if instance_limits(t) is None]
        if unknown:
            hints = [f"{t}: {hint}" for t in unknown if (hint := did_you_mean(t, load_limits()))]
            self.parser.error(
                f"INSTANCE_TYPE: {', '.join(unknown)} not in the shipped EC2 table (check the name; "
                "a type newer than the table is described by the controller at run time)"
                + "".join(f"; {hint}" for hint in hints)
            )
        for name in args.instance_types:
            limits = instance_limits(name)
            assert limits is not None
            pd = args.prefix_delegation and limits.supports_prefixes
            pods = max_pods(
                limits,
                prefix_delegated=pd,
                first_interface_index=args.first_interface_index,
                network_cards=args.network_cards,
                max_allocate=args.max_allocate,
                host_network_pods=args.host_network_pods,
            )
            vpc_cni = max_pods(limits)  # its defaults are the VPC CNI's table: card 0, plain, from index 0
            differs = _why_it_differs(args, limits, pd, pods, vpc_cni)
            if args.json:
                found = {
                    "instance_type": name,
                    "max_pods": pods,
                    "vpc_cni_table": vpc_cni,
                    "differs": differs,
                }
                print(json.dumps(found))
            else:
                note = f" (VPC CNI table: {vpc_cni}; {'; '.join(differs)})" if differs else ""
                print(f"{name}\t{pods}{note}")
        return 0


def _why_it_differs(
    args: argparse.Namespace, limits: InstanceLimits, pd: bool, pods: int, vpc_cni: int
) -> list[str]:
    """Why ``pods`` is not the VPC CNI table's figure (``eni-max-pods.txt``), each reason a phrase."""
    if pods == vpc_cni:
        return []
    reasons = []
    if pd:
        reasons.append("/28 prefixes: 16 addresses a slot (the VPC CNI's calculator then caps at 110 or 250)")
    elif args.prefix_delegation:
        reasons.append("no prefixes on this type (not Nitro)")
    if args.first_interface_index:
        reasons.append(f"interfaces below index {args.first_interface_index} held back")
    if any(limits.adapters_on(card) for card in args.network_cards if card):
        reasons.append("cards other than 0 counted (the table counts card 0 only)")
    if 0 not in args.network_cards:
        reasons.append("card 0 not in the pool")
    if args.max_allocate:
        reasons.append(f"max_allocate {args.max_allocate}")
    if args.host_network_pods != 2:
        reasons.append(f"{args.host_network_pods} host-network pods, not 2")
    return reasons


MAX_PODS = MaxPodsCommand()
