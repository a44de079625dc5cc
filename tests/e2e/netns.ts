/** Environment variable websdk_test.ts sets for the scenarios it runs inside the namespace. */
export const netnsEnv = "MEDIASERVER_E2E_NETNS";
