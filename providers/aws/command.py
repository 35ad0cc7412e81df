"""``eni-ipam aws-iam-policy``: the AWS provider's IAM policy, scoped to one cluster (docs/aws.md §2).

Registered under the ``eni_ipam.commands`` entry points (pyproject.toml), so the command line finds
it without importing the provider. This module imports only the standard library at load time: the
command line loads it at every start; the policy's module is imported when an option is checked or
the command runs.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable


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
