//! Conversations (GetConversation, ListConversations, UpdateConversation,
//! DeleteConversation); a run continues one with
//! `RunAgentRequest.conversation_id`.

use crate::{Error, OrchestratorClient, pb};

impl OrchestratorClient {
    /// A conversation: a page of its messages (`last`: the newest `last`;
    /// 0: from the oldest, `page_size` at a time from `page_token`) and its
    /// runs.
    pub async fn get_conversation(
        &self,
        id: &str,
        page_size: i32,
        page_token: &str,
        last: u32,
    ) -> Result<pb::Conversation, Error> {
        Ok(self
            .raw()
            .get_conversation(self.request(pb::GetConversationRequest {
                conversation_id: id.to_owned(),
                page_size,
                page_token: page_token.to_owned(),
                last,
            }))
            .await?
            .into_inner())
    }

    /// A page of the caller's conversations, most recently used first.
    pub async fn list_conversations(
        &self,
        page_size: i32,
        page_token: &str,
    ) -> Result<pb::ListConversationsResponse, Error> {
        Ok(self
            .raw()
            .list_conversations(self.request(pb::ListConversationsRequest {
                page_size,
                page_token: page_token.to_owned(),
            }))
            .await?
            .into_inner())
    }

    /// Sets a conversation's title (when given) and labels (an empty value
    /// removes one).
    pub async fn update_conversation(
        &self,
        request: pb::UpdateConversationRequest,
    ) -> Result<pb::Conversation, Error> {
        Ok(self
            .raw()
            .update_conversation(self.request(request))
            .await?
            .into_inner())
    }

    /// Deletes a conversation, its messages and its runs' histories.
    pub async fn delete_conversation(
        &self,
        id: &str,
    ) -> Result<pb::DeleteConversationResponse, Error> {
        Ok(self
            .raw()
            .delete_conversation(self.request(pb::DeleteConversationRequest {
                conversation_id: id.to_owned(),
            }))
            .await?
            .into_inner())
    }
}
